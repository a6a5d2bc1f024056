//! The module graph of `src/` has no cycle: `cargo test -p cuckoo-guard --test module_cycles`.
//!
//! Reads the sources, not the compiler's view. Every module is a node: `src/lib.rs` is the
//! crate, `src/a.rs` or `src/a/mod.rs` is `a`, `src/a/b.rs` is `a::b`. A path in code or in a
//! `use` item (comments and string literals left out) that starts with `crate::`, `super::`
//! or `self::`, or a `use` path whose first segment names a child module, is a dependency of
//! the module whose file holds it on the module the path names; a path through a module's own
//! `use` re-export is followed to where the name comes from. A glob (`use super::*`) names the
//! module it globs only.
//!
//! For every module, its child modules (each with everything below it) must depend on one
//! another without a cycle: at the top, `table` may use `stats` or `stats` use `table`, not
//! both; inside `table`, `copy` and `growth` likewise. A module and its own children are not
//! checked against each other (a child using `super::` items is how Rust modules share
//! them). A cycle is printed with one place (file and line) for each of its edges.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One dependency: the module whose file holds the path, the module path it names (its
/// segments after resolving `crate`, `super` and `self`), and where it was found.
#[derive(Debug, Clone)]
struct Reference {
    from: Vec<String>,
    to: Vec<String>,
    file: PathBuf,
    line: usize,
}

/// A module's file, its module path and its text without comments and string literals.
struct Module {
    path: Vec<String>,
    file: PathBuf,
    code: String,
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && !(parts.is_empty() && stem == "lib") {
        parts.push(stem.to_string());
    }
    parts
}

/// `text` with comments, string literals and character literals blanked out (newlines kept,
/// so that line numbers stay right).
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let end: String = std::iter::once('"')
                .chain(std::iter::repeat('#').take(hashes))
                .collect();
            let rest: String = chars[j + 1..].iter().collect();
            let len = rest.find(&end).map_or(rest.len(), |k| k + end.len());
            for ch in chars[i..j + 1 + rest[..len].chars().count()].iter() {
                out.push(blank(*ch));
            }
            i = j + 1 + rest[..len].chars().count();
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\''), or a lifetime ('a), which is kept.
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                for _ in i..=j.min(chars.len() - 1) {
                    out.push(' ');
                }
                i = j + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("   ");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Blanks every inline module declared under a `cfg` that needs `test`, and returns the
/// names of out-of-line child modules declared so (`#[cfg(test)] mod tests;`) and of inline
/// modules that are not test-only (which this check cannot read: their `super::` paths would
/// resolve wrong).
fn drop_test_modules(code: &str) -> (String, Vec<String>, Vec<String>) {
    let mut chars: Vec<char> = code.chars().collect();
    let mut test_children = Vec::new();
    let mut inline = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let at_mod = chars[i..].starts_with(&['m', 'o', 'd'])
            && !ident_before(&chars, i)
            && chars.get(i + 3).is_some_and(|c| c.is_whitespace());
        if !at_mod {
            i += 1;
            continue;
        }
        let mut p = Parser {
            chars: &chars,
            pos: i + 3,
        };
        let Some(name) = p.ident() else {
            i += 1;
            continue;
        };
        p.skip_space();
        let after = p.pos;
        // The attributes before `mod`: back to the end of the previous item.
        let start = chars[..i]
            .iter()
            .rposition(|&c| c == ';' || c == '}' || c == '{')
            .map_or(0, |k| k + 1);
        let attributes: String = chars[start..i].iter().collect();
        let test_only = attributes.contains("cfg(")
            && attributes
                .split(|c: char| !is_ident(c))
                .any(|word| word == "test")
            && !attributes.contains("not(test)");
        match chars.get(after) {
            Some(';') => {
                if test_only {
                    test_children.push(name);
                }
                i = after + 1;
            }
            Some('{') => {
                if !test_only {
                    inline.push(name);
                }
                let mut depth = 0;
                let mut k = after;
                while k < chars.len() {
                    match chars[k] {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    if chars[k] != '\n' {
                        chars[k] = ' ';
                    }
                    k += 1;
                }
                i = k;
            }
            _ => i = after,
        }
    }
    (chars.into_iter().collect(), test_children, inline)
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A parser over one file's stripped text.
struct Parser<'a> {
    chars: &'a [char],
    pos: usize,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self.pos < self.chars.len() && self.chars[self.pos].is_whitespace() {
            self.pos += 1;
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_space();
        let start = self.pos;
        while self.pos < self.chars.len() && is_ident(self.chars[self.pos]) {
            self.pos += 1;
        }
        (self.pos > start).then(|| self.chars[start..self.pos].iter().collect())
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip_space();
        let want: Vec<char> = s.chars().collect();
        if self.chars[self.pos..].starts_with(&want) {
            self.pos += want.len();
            true
        } else {
            false
        }
    }

    /// A path tree from here (`a::b::{c, d::e, *}`), appended to `prefix`: every leaf path.
    fn tree(&mut self, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut path = prefix;
        loop {
            self.skip_space();
            if self.eat("{") {
                loop {
                    self.skip_space();
                    if self.eat("}") {
                        break;
                    }
                    self.tree(path.clone(), out);
                    if !self.eat(",") {
                        self.eat("}");
                        break;
                    }
                }
                return;
            }
            if self.eat("*") {
                out.push(path);
                return;
            }
            match self.ident() {
                Some(segment) => path.push(segment),
                None => {
                    out.push(path);
                    return;
                }
            }
            if !self.eat("::") {
                out.push(path);
                return;
            }
        }
    }
}

/// Every path in `code` starting at `crate`, `super` or `self` followed by `::`, and every
/// `use` path, with its line.
fn paths(code: &str) -> Vec<(Vec<String>, usize, bool)> {
    let chars: Vec<char> = code.chars().collect();
    let mut line_of = Vec::with_capacity(chars.len());
    let mut line = 1;
    for &c in &chars {
        line_of.push(line);
        if c == '\n' {
            line += 1;
        }
    }
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_ident(chars[i]) || ident_before(&chars, i) {
            i += 1;
            continue;
        }
        let mut p = Parser {
            chars: &chars,
            pos: i,
        };
        let word = p.ident().unwrap();
        if word == "use" {
            let mut out = Vec::new();
            p.tree(Vec::new(), &mut out);
            for path in out {
                found.push((path, line_of[i], true));
            }
            i = p.pos.max(i + 1);
        } else if matches!(word.as_str(), "crate" | "super" | "self") && p.eat("::") {
            let mut out = Vec::new();
            p.tree(vec![word], &mut out);
            for path in out {
                found.push((path, line_of[i], false));
            }
            i = p.pos.max(i + 1);
        } else {
            i = p.pos;
        }
    }
    found
}

/// Resolves `path`, written in module `at`, to an absolute module path (`None` for an
/// external crate or a name that is not a module's).
fn absolute(
    at: &[String],
    path: &[String],
    in_use: bool,
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let mut base: Vec<String> = at.to_vec();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &path[1..];
        }
        Some("self") => rest = &path[1..],
        Some("super") => {
            let mut r = path;
            while r.first().map(String::as_str) == Some("super") {
                base.pop();
                r = &r[1..];
            }
            rest = r;
        }
        Some(first) if in_use => {
            let mut child = at.to_vec();
            child.push(first.to_string());
            if !modules.contains(&child) {
                return None;
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module a resolved path ends in, following `use` re-exports of the modules it passes
/// through (`imports`: module, name -> absolute path).
fn target(
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
    imports: &BTreeMap<(Vec<String>, String), Vec<String>>,
    depth: usize,
) -> Vec<String> {
    let mut module: Vec<String> = Vec::new();
    for (k, segment) in path.iter().enumerate() {
        let mut next = module.clone();
        next.push(segment.clone());
        if modules.contains(&next) {
            module = next;
            continue;
        }
        if depth < 8 {
            if let Some(source) = imports.get(&(module.clone(), segment.clone())) {
                let mut followed = source.clone();
                followed.extend(path[k + 1..].iter().cloned());
                return target(&followed, modules, imports, depth + 1);
            }
        }
        break;
    }
    module
}

fn load(src: &Path) -> (Vec<Module>, Vec<Reference>) {
    let mut files = Vec::new();
    collect_files(src, &mut files);
    let mut modules = Vec::new();
    let mut test_only: Vec<Vec<String>> = Vec::new();
    let mut inline_modules = Vec::new();
    for file in &files {
        let path = module_path(src, file);
        let (code, test_children, inline) =
            drop_test_modules(&strip(&fs::read_to_string(file).unwrap()));
        inline_modules.extend(
            inline
                .into_iter()
                .map(|name| (path.clone(), file.clone(), name)),
        );
        for child in test_children {
            let mut child_path = path.clone();
            child_path.push(child);
            test_only.push(child_path);
        }
        modules.push(Module {
            path,
            file: file.clone(),
            code,
        });
    }
    // Test modules and everything below them are left out: a test may drive its module
    // through the modules that use it.
    modules.retain(|m| !test_only.iter().any(|t| m.path.starts_with(t)));
    for (path, file, name) in inline_modules {
        assert!(
            test_only.iter().any(|t| path.starts_with(t)),
            "{}: inline module `{name}` is not test-only; this check reads one module per \
             file and cannot resolve its paths",
            file.display()
        );
    }
    let known: BTreeSet<Vec<String>> = modules.iter().map(|m| m.path.clone()).collect();
    let mut imports = BTreeMap::new();
    let mut found = Vec::new();
    for m in &modules {
        for (path, line, in_use) in paths(&m.code) {
            let Some(resolved) = absolute(&m.path, &path, in_use, &known) else {
                continue;
            };
            if in_use {
                if let Some(name) = resolved.last() {
                    if name != "self" && !known.contains(&resolved) {
                        imports.insert((m.path.clone(), name.clone()), resolved.clone());
                    }
                }
            }
            found.push((m.path.clone(), resolved, m.file.clone(), line));
        }
    }
    let references = found
        .into_iter()
        .map(|(from, resolved, file, line)| Reference {
            to: target(&resolved, &known, &imports, 0),
            from,
            file,
            line,
        })
        .collect();
    (modules, references)
}

/// The cycles among the children of each module: each as its edges in order.
fn cycles(modules: &[Module], references: &[Reference]) -> Vec<Vec<Reference>> {
    let parents: BTreeSet<Vec<String>> = modules
        .iter()
        .filter(|m| !m.path.is_empty())
        .map(|m| m.path[..m.path.len() - 1].to_vec())
        .collect();
    let mut found = Vec::new();
    for parent in &parents {
        let depth = parent.len();
        let child = |p: &[String]| -> Option<String> {
            (p.len() > depth && p[..depth] == parent[..]).then(|| p[depth].clone())
        };
        // child -> child -> one reference that makes the edge.
        let mut edges: BTreeMap<String, BTreeMap<String, Reference>> = BTreeMap::new();
        for r in references {
            if let (Some(a), Some(b)) = (child(&r.from), child(&r.to)) {
                if a != b {
                    edges
                        .entry(a)
                        .or_default()
                        .entry(b)
                        .or_insert_with(|| r.clone());
                }
            }
        }
        // A depth-first search from each node, in order, reporting the first cycle through
        // each node not already in a reported cycle.
        let mut reported: BTreeSet<String> = BTreeSet::new();
        for start in edges.keys() {
            if reported.contains(start) {
                continue;
            }
            if let Some(cycle) = cycle_from(start, &edges) {
                for r in &cycle {
                    reported.insert(child(&r.from).unwrap());
                }
                found.push(cycle);
            }
        }
    }
    found
}

/// A shortest cycle through `start`, by breadth-first search.
fn cycle_from(
    start: &str,
    edges: &BTreeMap<String, BTreeMap<String, Reference>>,
) -> Option<Vec<Reference>> {
    let mut previous: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.to_string()]);
    while let Some(node) = queue.pop_front() {
        for next in edges.get(&node).into_iter().flat_map(|e| e.keys()) {
            if next == start {
                let mut path = vec![node.clone()];
                while path.last().unwrap() != start {
                    path.push(previous[path.last().unwrap()].clone());
                }
                path.reverse();
                path.push(start.to_string());
                return Some(
                    path.windows(2)
                        .map(|w| edges[&w[0]][&w[1]].clone())
                        .collect(),
                );
            }
            if !previous.contains_key(next) && next != start {
                previous.insert(next.clone(), node.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

fn name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

#[test]
fn the_module_graph_of_src_has_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (modules, references) = load(&src);
    assert!(
        modules.len() > 10 && references.len() > 50,
        "read {} modules and {} references from {}: too few to be the crate",
        modules.len(),
        references.len(),
        src.display()
    );
    let found = cycles(&modules, &references);
    let mut report = String::new();
    for cycle in &found {
        report.push_str("cycle:\n");
        for r in cycle {
            report.push_str(&format!(
                "  {} -> {}  ({}:{})\n",
                name(&r.from),
                name(&r.to),
                r.file.strip_prefix(&src).unwrap_or(&r.file).display(),
                r.line
            ));
        }
    }
    assert!(
        found.is_empty(),
        "the modules of src/ import in a cycle:\n{report}"
    );
}

/// The check finds a cycle it is shown, and none where there is none.
#[test]
fn the_check_finds_a_planted_cycle() {
    let dir = std::env::temp_dir().join(format!("module_cycles_{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("b")).unwrap();
    fs::write(dir.join("lib.rs"), "mod a;\nmod b;\npub use crate::a::A;\n").unwrap();
    fs::write(dir.join("a.rs"), "// use crate::b::B;\npub struct A;\n").unwrap();
    fs::write(dir.join("b/mod.rs"), "mod c;\npub(crate) use self::c::C;\n").unwrap();
    fs::write(dir.join("b/c.rs"), "pub struct C(crate::A);\n").unwrap();
    let (modules, references) = load(&dir);
    assert!(cycles(&modules, &references).is_empty(), "no cycle yet");
    fs::write(dir.join("a.rs"), "use crate::{b::{C}, x};\npub struct A;\n").unwrap();
    let (modules, references) = load(&dir);
    let found = cycles(&modules, &references);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "one cycle: {found:?}");
    let mut edges: Vec<(String, String)> = found[0]
        .iter()
        .map(|r| (name(&r.from), name(&r.to)))
        .collect();
    edges.sort();
    assert_eq!(
        edges,
        [("a".into(), "b::c".into()), ("b::c".into(), "a".into())]
    );
}
