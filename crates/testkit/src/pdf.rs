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

/// A PDF of Helvetica pages, one line of `pages` on each, with a correct cross-reference table.
pub fn text_pages(pages: &[&str]) -> Vec<u8> {
    document(&text_pages_objects(pages))
}

/// The objects of [`text_pages`]: 1 catalog, 2 pages, 3 font, then per page its page object and
/// its content stream.
pub fn text_pages_objects(pages: &[&str]) -> Vec<Vec<u8>> {
    let n = pages.len();
    let mut objects: Vec<String> = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {n} >>",
            (0..n).map(|i| format!("{} 0 R", 4 + 2 * i)).collect::<Vec<_>>().join(" ")
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>".to_owned(),
    ];
    for (i, text) in pages.iter().enumerate() {
        let stream = format!("BT /F1 12 Tf 72 720 Td ({text}) Tj ET");
        objects.push(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
            5 + 2 * i
        ));
        objects.push(format!("<< /Length {} >>\nstream\n{stream}\nendstream", stream.len()));
    }
    objects.into_iter().map(String::into_bytes).collect()
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
