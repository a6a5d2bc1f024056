//! Rewriting the generated sections of a Markdown file and nothing else.
//!
//! A generated section sits between two marker lines, `<!-- generated:NAME begin -->` and
//! `<!-- generated:NAME end -->`; every line outside such a pair is copied unchanged. Any
//! line starting with `<!-- generated:` must be one of the two markers.

use std::collections::BTreeMap;
use std::fmt;

const PREFIX: &str = "<!-- generated:";

/// Why a file's generated sections cannot be rewritten.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum SpliceError {
    /// A line starting `<!-- generated:` that is not `<!-- generated:NAME begin|end -->`.
    Malformed { line: usize, text: String },
    /// A begin marker before the end of the section `open`.
    Nested {
        line: usize,
        name: String,
        open: String,
    },
    /// An end marker with no begin marker of the same name open; `open` is the section
    /// open there, if any.
    UnexpectedEnd {
        line: usize,
        name: String,
        open: Option<String>,
    },
    /// A begin marker with no end marker.
    Unterminated { line: usize, name: String },
    /// A second section of the same name.
    Duplicate { line: usize, name: String },
    /// A section the report does not write.
    Unknown { line: usize, name: String },
    /// Sections the report writes that have no markers.
    Missing { names: Vec<String> },
}

impl fmt::Display for SpliceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpliceError::Malformed { line, text } => write!(
                f,
                "line {line}: `{text}` is not a marker; markers are \
                 `<!-- generated:NAME begin -->` and `<!-- generated:NAME end -->`"
            ),
            SpliceError::Nested { line, name, open } => write!(
                f,
                "line {line}: section `{name}` begins inside section `{open}`, which has not ended"
            ),
            SpliceError::UnexpectedEnd { line, name, open } => match open {
                Some(open) => write!(
                    f,
                    "line {line}: end of section `{name}` inside section `{open}`, which has not ended"
                ),
                None => write!(f, "line {line}: end of section `{name}`, which has not begun"),
            },
            SpliceError::Unterminated { line, name } => {
                write!(f, "line {line}: section `{name}` begins and never ends")
            }
            SpliceError::Duplicate { line, name } => {
                write!(f, "line {line}: a second section `{name}`")
            }
            SpliceError::Unknown { line, name } => {
                write!(
                    f,
                    "line {line}: section `{name}` is not one the report writes"
                )
            }
            SpliceError::Missing { names } => write!(
                f,
                "no markers for section(s) {}: put `<!-- generated:NAME begin -->` and \
                 `<!-- generated:NAME end -->` lines where each belongs",
                names.join(", ")
            ),
        }
    }
}

impl std::error::Error for SpliceError {}

/// A marker line.
enum Marker<'a> {
    Begin(&'a str),
    End(&'a str),
}

/// The marker `line` holds: `Ok(None)` for an ordinary line.
fn marker(line: &str) -> Result<Option<Marker<'_>>, ()> {
    let text = line.trim();
    let Some(rest) = text.strip_prefix(PREFIX) else {
        return Ok(None);
    };
    let rest = rest.strip_suffix(" -->").ok_or(())?;
    let (name, which) = rest.split_once(' ').ok_or(())?;
    let valid = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if name.is_empty() || !name.chars().all(valid) {
        return Err(());
    }
    match which {
        "begin" => Ok(Some(Marker::Begin(name))),
        "end" => Ok(Some(Marker::End(name))),
        _ => Err(()),
    }
}

/// One section in the file: its name, its begin marker's line number, and the byte range
/// of the lines between its markers.
struct Section<'a> {
    name: &'a str,
    line: usize,
    body: std::ops::Range<usize>,
}

/// The well-formed sections of `doc`, in order.
fn parse(doc: &str) -> Result<Vec<Section<'_>>, SpliceError> {
    let mut sections: Vec<Section<'_>> = Vec::new();
    let mut open: Option<(&str, usize, usize)> = None;
    let mut at = 0;
    for (i, line) in doc.split_inclusive('\n').enumerate() {
        let (start, end) = (at, at + line.len());
        at = end;
        let number = i + 1;
        let malformed = || SpliceError::Malformed {
            line: number,
            text: line.trim().to_string(),
        };
        match (marker(line).map_err(|()| malformed())?, open) {
            (None, _) => {}
            (Some(Marker::Begin(name)), None) => {
                if sections.iter().any(|s| s.name == name) {
                    let name = name.to_string();
                    return Err(SpliceError::Duplicate { line: number, name });
                }
                open = Some((name, number, end));
            }
            (Some(Marker::Begin(name)), Some((open, _, _))) => {
                let (name, open) = (name.to_string(), open.to_string());
                return Err(SpliceError::Nested {
                    line: number,
                    name,
                    open,
                });
            }
            (Some(Marker::End(name)), Some((begun, line, body_start))) if name == begun => {
                sections.push(Section {
                    name,
                    line,
                    body: body_start..start,
                });
                open = None;
            }
            (Some(Marker::End(name)), open) => {
                let name = name.to_string();
                let open = open.map(|(open, _, _)| open.to_string());
                return Err(SpliceError::UnexpectedEnd {
                    line: number,
                    name,
                    open,
                });
            }
        }
    }
    match open {
        Some((name, line, _)) => Err(SpliceError::Unterminated {
            line,
            name: name.to_string(),
        }),
        None => Ok(sections),
    }
}

/// Checks that `doc` has well-formed markers for exactly the sections `names`.
pub(crate) fn check(doc: &str, names: &[String]) -> Result<(), SpliceError> {
    let sections = parse(doc)?;
    if let Some(s) = sections.iter().find(|s| !names.iter().any(|n| n == s.name)) {
        let name = s.name.to_string();
        return Err(SpliceError::Unknown { line: s.line, name });
    }
    let missing: Vec<String> = names
        .iter()
        .filter(|n| !sections.iter().any(|s| s.name == n.as_str()))
        .cloned()
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(SpliceError::Missing { names: missing })
    }
}

/// `doc` with the body of each section replaced by its text in `generated` (between blank
/// lines), every other line as it was. Fails, changing nothing, unless `doc` has well-formed
/// markers for exactly the sections in `generated`.
pub(crate) fn splice(
    doc: &str,
    generated: &BTreeMap<String, String>,
) -> Result<String, SpliceError> {
    let names: Vec<String> = generated.keys().cloned().collect();
    check(doc, &names)?;
    let mut out = String::with_capacity(doc.len());
    let mut copied = 0;
    for section in parse(doc)? {
        out.push_str(&doc[copied..section.body.start]);
        out.push('\n');
        out.push_str(generated[section.name].trim_matches('\n'));
        out.push_str("\n\n");
        copied = section.body.end;
    }
    out.push_str(&doc[copied..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# Title\n\
        Hand-written intro.\n\
        <!-- generated:a begin -->\n\
        old a\n\
        <!-- generated:a end -->\n\
        \n\
        Between, mentioning <!-- generated:a begin --> in passing.\n\
        <!-- generated:b begin -->\n\
        <!-- generated:b end -->\n\
        Closing text, no newline at the end.";

    fn sections(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn replaces_bodies_and_keeps_every_other_line() {
        let out = splice(DOC, &sections(&[("a", "new a\n"), ("b", "| b |")])).unwrap();
        let want = "# Title\n\
            Hand-written intro.\n\
            <!-- generated:a begin -->\n\
            \n\
            new a\n\
            \n\
            <!-- generated:a end -->\n\
            \n\
            Between, mentioning <!-- generated:a begin --> in passing.\n\
            <!-- generated:b begin -->\n\
            \n\
            | b |\n\
            \n\
            <!-- generated:b end -->\n\
            Closing text, no newline at the end.";
        assert_eq!(out, want);
        let again = splice(&out, &sections(&[("a", "new a"), ("b", "| b |")])).unwrap();
        assert_eq!(again, want, "splicing the same text again changes nothing");
    }

    #[test]
    fn a_section_without_markers_is_an_error() {
        let generated = sections(&[("a", "x"), ("b", "y"), ("c", "z")]);
        let missing = vec!["c".to_string()];
        assert_eq!(
            splice(DOC, &generated),
            Err(SpliceError::Missing { names: missing })
        );
    }

    #[test]
    fn markers_for_a_section_the_report_does_not_write_are_an_error() {
        let err = splice(DOC, &sections(&[("a", "x")])).unwrap_err();
        assert_eq!(
            err,
            SpliceError::Unknown {
                line: 8,
                name: "b".into()
            }
        );
    }

    #[test]
    fn malformed_markers_are_errors() {
        let generated = sections(&[("a", "x")]);
        let cases = [
            (
                "<!-- generated:a begin -->\n",
                SpliceError::Unterminated {
                    line: 1,
                    name: "a".into(),
                },
            ),
            (
                "x\n<!-- generated:a end -->\n",
                SpliceError::UnexpectedEnd {
                    line: 2,
                    name: "a".into(),
                    open: None,
                },
            ),
            (
                "<!-- generated:a begin -->\n<!-- generated:b begin -->\n",
                SpliceError::Nested {
                    line: 2,
                    name: "b".into(),
                    open: "a".into(),
                },
            ),
            (
                "<!-- generated:a begin -->\n<!-- generated:b end -->\n",
                SpliceError::UnexpectedEnd {
                    line: 2,
                    name: "b".into(),
                    open: Some("a".into()),
                },
            ),
            (
                "<!-- generated:a begin -->\n<!-- generated:a end -->\n\
                 <!-- generated:a begin -->\n<!-- generated:a end -->\n",
                SpliceError::Duplicate {
                    line: 3,
                    name: "a".into(),
                },
            ),
            (
                "<!-- generated:a start -->\n",
                SpliceError::Malformed {
                    line: 1,
                    text: "<!-- generated:a start -->".into(),
                },
            ),
            (
                "<!-- generated:a begin\n",
                SpliceError::Malformed {
                    line: 1,
                    text: "<!-- generated:a begin".into(),
                },
            ),
            (
                "<!-- generated: begin -->\n",
                SpliceError::Malformed {
                    line: 1,
                    text: "<!-- generated: begin -->".into(),
                },
            ),
        ];
        for (doc, want) in cases {
            assert_eq!(splice(doc, &generated), Err(want), "{doc:?}");
        }
    }

    #[test]
    fn benchmarks_md_has_every_section_the_report_writes() {
        let doc = include_str!("../../BENCHMARKS.md");
        if let Err(e) = check(doc, &crate::markdown::section_names()) {
            panic!("BENCHMARKS.md: {e}");
        }
    }
}
