//! Minimal PDF files written by hand for tests: the objects given, numbered from 1 (the first is
//! the catalog), behind a correct cross-reference table, so real PDF readers load them; or
//! without any, as some generators write them.

/// A PDF of `objects` (their bodies, without `N 0 obj`/`endobj`); object 1 must be the catalog.
pub fn document(objects: &[Vec<u8>]) -> Vec<u8> {
    let (mut out, offsets) = header_and_objects(objects);
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!("trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 1).as_bytes(),
    );
    out
}

/// [`document`] without its cross-reference table, trailer and `startxref`: the header and the
/// objects only.
pub fn document_without_xref(objects: &[Vec<u8>]) -> Vec<u8> {
    header_and_objects(objects).0
}

/// The header and `objects`, and where each object starts.
fn header_and_objects(objects: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(object);
        out.extend_from_slice(b"\nendobj\n");
    }
    (out, offsets)
}
