//! Reading a PDF whose cross-reference table is missing, broken or points to the wrong places,
//! as PDF readers (pdf.js, poppler) do: the file is scanned for the headers of its objects
//! (`N G obj` at the start of a line), a table of where they are is rebuilt and appended to a
//! copy of the file, which lopdf then loads as usual; the catalog is the last object in the file
//! of `/Type /Catalog`. The rebuilt table may be at most as long as the file itself, so the copy
//! is at most twice its size; the caller's limits on what the streams inflate to apply to the
//! recovered document as to any other.

use std::collections::BTreeMap;

use pdf_extract::{Document, Object, ObjectId};

/// Largest object number a PDF may use (ISO 32000-1, annex C).
const MAX_OBJECT_NUMBER: u32 = 8_388_607;
/// Bytes of one entry of a cross-reference table (`oooooooooo ggggg n \n`).
const ENTRY_BYTES: usize = 20;

/// The document `bytes` holds, read through a rebuilt cross-reference table, or `None` when no
/// object or no catalog is found in it (or it is not a PDF at all).
pub(super) fn recover(bytes: &[u8]) -> Option<Document> {
    // Offsets count from the header, as lopdf reads a file with bytes before it.
    let start = bytes.windows(5).position(|w| w == b"%PDF-")?;
    let body = &bytes[start..];
    let objects = scan_objects(body);
    let table = rebuilt_table(&objects, body.len())?;
    let mut repaired = Vec::with_capacity(body.len() + table.len() + 1);
    repaired.extend_from_slice(body);
    repaired.push(b'\n');
    let table_offset = repaired.len();
    repaired.extend_from_slice(&table);
    repaired.extend_from_slice(format!("startxref\n{table_offset}\n%%EOF\n").as_bytes());

    let mut document = Document::load_mem(&repaired).ok()?;
    let catalog = last_catalog(&document, &objects)?;
    document.trailer.set("Root", Object::Reference(catalog));
    Some(document)
}

/// Where each object's header is, by object number; a later header of the same number wins (an
/// incremental update appends the new version of an object after the old one).
fn scan_objects(body: &[u8]) -> BTreeMap<u32, (u16, usize)> {
    let mut objects = BTreeMap::new();
    let mut line_start = 0;
    while line_start < body.len() {
        if let Some((number, generation, offset)) = object_header(body, line_start) {
            objects.insert(number, (generation, offset));
        }
        match body[line_start..].iter().position(|&b| b == b'\n' || b == b'\r') {
            Some(end) => line_start += end + 1,
            None => break,
        }
    }
    objects
}

/// `N G obj` at `at` (after blanks), followed by a delimiter: the object's number, generation and
/// the offset of its header.
fn object_header(body: &[u8], at: usize) -> Option<(u32, u16, usize)> {
    let mut pos = at;
    while body.get(pos).is_some_and(|&b| b == b' ' || b == b'\t') {
        pos += 1;
    }
    let offset = pos;
    let (number, after_number) = digits(body, pos, 7)?;
    let after_blank = blanks(body, after_number)?;
    let (generation, after_generation) = digits(body, after_blank, 5)?;
    let keyword = blanks(body, after_generation)?;
    if body.get(keyword..keyword + 3) != Some(b"obj") {
        return None;
    }
    if body.get(keyword + 3).is_some_and(|&b| !is_delimiter(b)) {
        return None;
    }
    let number = u32::try_from(number).ok().filter(|n| (1..=MAX_OBJECT_NUMBER).contains(n))?;
    let generation = u16::try_from(generation).ok()?;
    Some((number, generation, offset))
}

/// The decimal number of at most `max_digits` digits at `pos`, and the position after it.
fn digits(body: &[u8], pos: usize, max_digits: usize) -> Option<(u64, usize)> {
    let count = body[pos.min(body.len())..].iter().take(max_digits + 1).take_while(|b| b.is_ascii_digit()).count();
    if count == 0 || count > max_digits {
        return None;
    }
    let value = body[pos..pos + count].iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    Some((value, pos + count))
}

/// The position after one or more blanks at `pos`.
fn blanks(body: &[u8], pos: usize) -> Option<usize> {
    let count = body[pos.min(body.len())..].iter().take_while(|&&b| matches!(b, b' ' | b'\t' | b'\r' | b'\n')).count();
    (count > 0).then_some(pos + count)
}

/// PDF white space and delimiters: what may follow a keyword.
fn is_delimiter(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' | b'\0' | b'<' | b'[' | b'(' | b'/' | b'%')
}

/// A cross-reference section (one subsection per run of consecutive numbers) and trailer for
/// `objects`, or `None` when there are none or it would be longer than the file.
fn rebuilt_table(objects: &BTreeMap<u32, (u16, usize)>, file_len: usize) -> Option<Vec<u8>> {
    let last = *objects.keys().next_back()?;
    if objects.len().saturating_mul(ENTRY_BYTES) > file_len {
        return None;
    }
    let mut table = b"xref\n0 1\n0000000000 65535 f \n".to_vec();
    let mut entries = objects.iter().peekable();
    while let Some(&(&first, _)) = entries.peek() {
        let mut run = Vec::new();
        while let Some(&(&number, &(generation, offset))) = entries.peek() {
            if number != first + run.len() as u32 {
                break;
            }
            run.push(format!("{offset:010} {generation:05} n \n"));
            entries.next();
        }
        table.extend_from_slice(format!("{first} {}\n", run.len()).as_bytes());
        for entry in run {
            table.extend_from_slice(entry.as_bytes());
        }
    }
    table.extend_from_slice(format!("trailer\n<< /Size {} >>\n", last + 1).as_bytes());
    Some(table)
}

/// The catalog: of the objects of `/Type /Catalog` lopdf loaded, the one last in the file.
fn last_catalog(document: &Document, objects: &BTreeMap<u32, (u16, usize)>) -> Option<ObjectId> {
    objects
        .iter()
        .filter(|(number, (generation, _))| {
            document
                .objects
                .get(&(**number, *generation))
                .and_then(|object| object.as_dict().ok())
                .is_some_and(|dict| dict.has_type(b"Catalog"))
        })
        .max_by_key(|(_, (_, offset))| *offset)
        .map(|(number, (generation, _))| (*number, *generation))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_headers_are_found_at_line_starts_only() {
        let body = b"%PDF-1.4\n1 0 obj\n<< >>\nendobj\n  12 3 obj<< >>\nx 4 0 obj\n5 0 objx\r6 0 obj";
        let objects = scan_objects(body);
        assert_eq!(objects.keys().copied().collect::<Vec<_>>(), vec![1, 6, 12]);
        assert_eq!(objects[&1], (0, 9));
        assert_eq!(objects[&12].0, 3);
        assert_eq!(&body[objects[&12].1..objects[&12].1 + 8], b"12 3 obj");
    }

    #[test]
    fn a_later_header_of_the_same_object_wins() {
        let objects = scan_objects(b"%PDF-1.4\n2 0 obj\n1\nendobj\n2 0 obj\n2\nendobj\n");
        assert_eq!(objects[&2], (0, 26));
    }

    #[test]
    fn the_rebuilt_table_is_bounded_by_the_file() {
        let body: Vec<u8> = (1..=100).flat_map(|n| format!("{n} 0 obj\n").into_bytes()).collect();
        assert!(rebuilt_table(&scan_objects(&body), body.len()).is_none(), "headers alone are refused");
        assert!(rebuilt_table(&BTreeMap::new(), 1000).is_none(), "no objects, no table");
    }

    #[test]
    fn one_subsection_per_run_of_numbers() {
        let objects = BTreeMap::from([(1, (0, 9)), (2, (0, 30)), (7, (1, 60))]);
        let table = String::from_utf8(rebuilt_table(&objects, 10_000).unwrap()).unwrap();
        assert_eq!(
            table,
            "xref\n0 1\n0000000000 65535 f \n1 2\n0000000009 00000 n \n0000000030 00000 n \n\
             7 1\n0000000060 00001 n \ntrailer\n<< /Size 8 >>\n"
        );
    }
}
