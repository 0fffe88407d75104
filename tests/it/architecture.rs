//! The house's import rules, checked against the code's own imports (issue 64): every arrow
//! between rooms is one ARCHITECTURE.md's table allows, no files import each other in a circle,
//! and the routes (`api`) import neither `actors` nor `contexts`.
//!
//! What is read. The check builds the module tree the compiler builds: from the crate roots
//! (`src/lib.rs`, `src/main.rs`, and `src/grammar/lib.rs`, which `lib.rs` names `grammar`)
//! through every `mod name;` and inline `mod name { .. }`. An item under `#[cfg(test)]` (or a
//! `cfg` that needs `test`, such as `cfg(all(test, unix))`) is skipped, and so is every file
//! only such a `mod` declares. So test code is left out by the compiler's own rule, not by file
//! names: every `tests` module (`tests.rs` or `tests/`) and `gguf/testing.rs`
//! are all declared under `#[cfg(test)]`; a test helper declared without it is checked like any
//! other code. Inside what remains, an import is every `use` path and every path written in
//! the code that starts with `crate::`, `super::`, `self::`, `llamay::`, `llamay_grammar::` or
//! the name of a module declared in the same module; comments and string literals are not
//! code. A path is resolved through the module tree to the file of the deepest module it
//! names: `crate::actors::model::QueueLimits` is `src/actors/model/mod.rs`. A re-export is an
//! arrow where it is written (`pub use crate::environment::HOME_ENV` in `store/mod.rs` is an
//! arrow from `store` to `environment`), as the compiler sees it.
//!
//! Rooms. A file's room is its top-level folder or file under `src/` (`src/api/ollama/types.rs`
//! is `api`, `src/error.rs` is `error`). The table "Rooms of `src/`" in ARCHITECTURE.md names,
//! per room, the rooms it may import ("everything below": every room in a later row, "-": none).
//! That relation must have no circle itself, so code that keeps to it has floors and no arrow
//! runs back up.
//!
//! Circles. Between files: two kinds of arrow tie no circle. An arrow from a file to the file
//! of a module enclosing it (a child's `super::Item`, `crate::Item` of `lib.rs`) is part of
//! that module; and a `pub use` of a name the file does not use itself (`pub use
//! store::serve_store` in `daemon/mod.rs`) is only the module's face. Every other arrow ties,
//! between rooms or inside one (siblings, a `mod.rs` and its children). Any set of files that
//! reach each other is reported with what ties it.
//!
//! Cost: one read and one lexing pass over `src/` (about 60k lines): well under a second.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// Room pairs no table may allow, whatever ARCHITECTURE.md says: routes only translate wire
/// shapes, and reach the workers and contexts through the service.
const FORBIDDEN: &[(&str, &str)] = &[("api", "actors"), ("api", "contexts")];

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn imports_keep_to_the_rooms_table_and_close_no_circle() {
    let root = repository();
    let tree = read_sources(&root.join("src"), "src").expect("src/");
    let markdown = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let table = RoomTable::parse(&markdown).unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
    let report = check(&tree, &table).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", report.summary());

    let mut message = String::new();
    for violation in &report.violations {
        let _ = writeln!(message, "{violation}");
    }
    assert!(report.violations.is_empty(), "{} violations:\n{message}", report.violations.len());
}

#[test]
fn the_rooms_table_has_floors_and_keeps_the_routes_off_the_workers() {
    let markdown = std::fs::read_to_string(repository().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let table = RoomTable::parse(&markdown).unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
    if let Some(circle) = table.circle() {
        panic!("the table's \"may import\" runs in a circle: {}", circle.join(" -> "));
    }
    for (from, to) in FORBIDDEN {
        assert!(!table.allows(from, to), "ARCHITECTURE.md lets {from} import {to}");
    }
    let rooms = read_sources(&repository().join("src"), "src")
        .expect("src/")
        .keys()
        .map(|file| room_of(file))
        .collect::<BTreeSet<_>>();
    for room in rooms {
        assert!(table.has(&room), "src/ has a room {room:?} that ARCHITECTURE.md's table does not name");
    }
}

/// The check itself, on a made-up tree: a ground-floor room importing one above it, two
/// sibling files importing each other, and the arrows that tie no circle.
#[test]
fn the_check_finds_an_arrow_up_and_a_circle_and_nothing_else() {
    let table = RoomTable::parse(
        "## Rooms of `src/`\n\
         | room | owns | may import |\n|---|---|---|\n\
         | `app/` | the top | everything below |\n\
         | `low/` | the ground | - |\n",
    )
    .expect("table");
    let tree: BTreeMap<String, String> = [
        ("src/lib.rs", "pub mod app;\npub mod low;\n"),
        // A parent using its child and the child using the parent's item: no circle.
        ("src/app/mod.rs", "mod a;\nmod b;\nmod c;\nmod d;\nmod f;\nuse c::Helper;\npub struct Shared;\n"),
        ("src/app/a.rs", "use super::b::Bee;\n/// `crate::low::up` in a comment is no import.\npub struct A(Bee);\n"),
        ("src/app/b.rs", "pub struct Bee;\npub fn b() -> super::a::A { todo!() }\nconst S: &str = \"crate::low::x\";\n"),
        ("src/app/c.rs", "use super::Shared;\npub struct Helper(Shared);\n"),
        // A name `d` only hands on ties no circle: d -> e (face) -> f -> d.
        ("src/app/d/mod.rs", "mod e;\npub use e::Eve;\npub struct Dee;\n"),
        ("src/app/d/e.rs", "pub struct Eve(pub crate::app::f::Eff);\n"),
        ("src/app/f.rs", "pub struct Eff(pub super::d::Dee);\n"),
        ("src/low/mod.rs", "pub fn ground() -> crate::app::Shared { todo!() }\n#[cfg(test)]\nmod tests;\n"),
        // Test code may import anything.
        ("src/low/tests.rs", "use crate::app::a::A;\n"),
    ]
    .into_iter()
    .map(|(path, text)| (path.to_string(), text.to_string()))
    .collect();
    let report = check(&tree, &table).expect("check");
    let keys: Vec<String> = report.violations.iter().map(Violation::key).collect();
    assert_eq!(keys, ["src/low/mod.rs -> app", "circle: src/app/a.rs, src/app/b.rs"], "{report:#?}");
    let shown: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
    assert!(shown[0].contains("src/low/mod.rs:1: low -> app (crate::app::Shared)"), "{}", shown[0]);
    assert!(shown[1].contains("src/app/a.rs:1 -> src/app/b.rs (super::b::Bee)"), "{}", shown[1]);
    assert!(shown[1].contains("src/app/b.rs:2 -> src/app/a.rs (super::a::A)"), "{}", shown[1]);
    assert_eq!(report.files_checked, 9, "tests.rs is declared under cfg(test)");
}

#[test]
fn the_lexer_skips_comments_strings_and_test_items() {
    let text = r####"
        // use crate::a;
        /* crate::b /* nested crate::c */ */
        const A: &str = r#"crate::d "quoted" "#;
        const B: char = '"';
        const C: u8 = b'\'';
        fn f<'a>(x: &'a str) -> crate::e::E { 'label: loop { break 'label } }
        #[cfg(all(test, unix))]
        fn only_in_tests() -> crate::f::F {}
        #[cfg(any(test, feature = "x"))]
        fn also_in_builds() -> crate::g::G {}
        struct S {
            #[cfg(test)]
            counted: crate::h::H,
            kept: crate::i::I,
        }
        use crate::{j::{self, J}, k::*};
    "####;
    let walked = walk(&lex(text));
    let paths: Vec<String> = walked.paths.iter().map(|p| p.segments.join("::")).collect();
    assert_eq!(paths, ["crate::e::E", "crate::g::G", "crate::i::I", "crate::j", "crate::j::J", "crate::k"]);
}

// ---- the sources ----------------------------------------------------------------------------

/// Every `.rs` file under `dir`, by its path from the repository root (`src/api/mod.rs`).
fn read_sources(dir: &Path, prefix: &str) -> std::io::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = format!("{prefix}/{name}");
        if entry.file_type()?.is_dir() {
            files.extend(read_sources(&entry.path(), &path)?);
        } else if name.ends_with(".rs") {
            files.insert(path, std::fs::read_to_string(entry.path())?);
        }
    }
    Ok(files)
}

/// `src/api/ollama/types.rs` -> `api`; `src/error.rs` -> `error`.
fn room_of(file: &str) -> String {
    let inside = file.strip_prefix("src/").unwrap_or(file);
    match inside.split_once('/') {
        Some((folder, _)) => folder.to_string(),
        None => inside.trim_end_matches(".rs").to_string(),
    }
}

// ---- ARCHITECTURE.md's table ----------------------------------------------------------------

/// The "Rooms of `src/`" table: per room, the rooms it may import.
#[derive(Debug)]
struct RoomTable {
    /// In the table's order, top first.
    rooms: Vec<String>,
    may_import: BTreeMap<String, BTreeSet<String>>,
}

impl RoomTable {
    fn parse(markdown: &str) -> Result<RoomTable, String> {
        let section = markdown
            .split("\n## ")
            .find(|section| section.starts_with("Rooms of `src/`"))
            .or_else(|| markdown.strip_prefix("## ").filter(|s| s.starts_with("Rooms of `src/`")))
            .ok_or("no section \"## Rooms of `src/`\"")?;
        let rows: Vec<Vec<&str>> = section
            .lines()
            .filter(|line| line.starts_with('|'))
            .map(|line| line.trim().trim_matches('|').split('|').map(str::trim).collect())
            .collect();
        let header = rows.first().ok_or("the section has no table")?;
        let column = header.iter().position(|cell| *cell == "may import").ok_or("no column \"may import\"")?;
        let mut listed: Vec<(Vec<String>, String)> = Vec::new();
        for row in rows.iter().skip(2) {
            let cell = row.get(column).ok_or_else(|| format!("a row without \"may import\": {row:?}"))?;
            let rooms = ticked_names(row[0]);
            if rooms.is_empty() {
                return Err(format!("a row names no room: {row:?}"));
            }
            listed.push((rooms, cell.to_string()));
        }
        let rooms: Vec<String> = listed.iter().flat_map(|(rooms, _)| rooms.clone()).collect();
        let mut may_import = BTreeMap::new();
        for (index, (row_rooms, cell)) in listed.iter().enumerate() {
            let allowed: BTreeSet<String> = match cell.as_str() {
                "everything below" => listed[index + 1..].iter().flat_map(|(rooms, _)| rooms.clone()).collect(),
                "-" => BTreeSet::new(),
                text => {
                    let names = ticked_names(text);
                    if names.is_empty() {
                        return Err(format!("\"may import\" of {row_rooms:?} is neither rooms in backticks, \"everything below\" nor \"-\": {text:?}"));
                    }
                    names.into_iter().collect()
                }
            };
            if let Some(unknown) = allowed.iter().find(|name| !rooms.contains(name)) {
                return Err(format!("{row_rooms:?} may import {unknown:?}, which is no room of the table"));
            }
            for room in row_rooms {
                may_import.insert(room.clone(), allowed.clone());
            }
        }
        Ok(RoomTable { rooms, may_import })
    }

    fn has(&self, room: &str) -> bool {
        self.may_import.contains_key(room)
    }

    fn allows(&self, from: &str, to: &str) -> bool {
        self.may_import.get(from).is_some_and(|allowed| allowed.contains(to))
    }

    /// A circle in "may import", if there is one: then the table has no floors.
    fn circle(&self) -> Option<Vec<String>> {
        let edges: BTreeMap<&str, Vec<&str>> = self
            .may_import
            .iter()
            .map(|(room, allowed)| (room.as_str(), allowed.iter().map(String::as_str).collect()))
            .collect();
        let nodes: Vec<&str> = self.rooms.iter().map(String::as_str).collect();
        strongly_connected(&nodes, &edges)
            .into_iter()
            .find(|component| component.len() > 1)
            .map(|component| component.into_iter().map(str::to_string).collect())
    }
}

/// The names in backticks, without a trailing `/` or `.rs`: "`main.rs`, `cli/`" -> main, cli.
fn ticked_names(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|name| name.trim_end_matches('/').trim_end_matches(".rs").to_string())
        .filter(|name| !name.is_empty())
        .collect()
}

// ---- the check ------------------------------------------------------------------------------

#[derive(Debug)]
struct Report {
    files_checked: usize,
    files_left_out: usize,
    imports: usize,
    room_arrows: BTreeSet<(String, String)>,
    violations: Vec<Violation>,
}

impl Report {
    /// The counts issue 64 asks for: arrows the table does not allow (arrows up), circles, and
    /// imports from the routes into `actors` or `contexts`.
    fn summary(&self) -> String {
        let circles = self.violations.iter().filter(|v| matches!(v, Violation::Circle { .. })).count();
        let refused: BTreeSet<(&str, &str)> = self
            .violations
            .iter()
            .filter_map(|v| match v {
                Violation::RoomArrow { from_room, to_room, .. } => Some((from_room.as_str(), to_room.as_str())),
                Violation::Circle { .. } => None,
            })
            .collect();
        let routes_down: usize = self
            .violations
            .iter()
            .filter_map(|v| match v {
                Violation::RoomArrow { from_room, to_room, imports, .. }
                    if FORBIDDEN.contains(&(from_room.as_str(), to_room.as_str())) =>
                {
                    Some(imports.len())
                }
                _ => None,
            })
            .sum();
        format!(
            "architecture: {} files checked ({} only built for tests left out), {} imports; {} arrows between rooms, \
             {} of them not allowed by ARCHITECTURE.md; {circles} circles; {routes_down} imports from api into actors or contexts",
            self.files_checked,
            self.files_left_out,
            self.imports,
            self.room_arrows.len(),
            refused.len(),
        )
    }
}

/// One import: `from` (a file, at `line`) names `path`, which is in `to`.
#[derive(Debug, Clone)]
struct Import {
    from: String,
    line: usize,
    to: String,
    path: String,
    /// A `pub use` of a name `from` does not use itself: the module's face, no tie of a circle.
    only_hands_on: bool,
}

#[derive(Debug)]
enum Violation {
    /// Imports from one file into a room its room may not import.
    RoomArrow { from_room: String, to_room: String, allowed: Vec<String>, imports: Vec<Import> },
    /// Files that import each other, with the imports that tie them.
    Circle { files: Vec<String>, ties: Vec<Import> },
}

impl Violation {
    /// A one-line name: the arrow (first importing file -> room) or the files of the circle.
    fn key(&self) -> String {
        match self {
            Violation::RoomArrow { to_room, imports, .. } => format!("{} -> {to_room}", imports[0].from),
            Violation::Circle { files, .. } => format!("circle: {}", files.join(", ")),
        }
    }
}


impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::RoomArrow { from_room, to_room, allowed, imports } => {
                let allowed = if allowed.is_empty() { "nothing".to_string() } else { allowed.join(", ") };
                writeln!(f, "{from_room} may not import {to_room} (ARCHITECTURE.md: {from_room} may import {allowed}):")?;
                for import in imports {
                    writeln!(f, "  {}:{}: {from_room} -> {to_room} ({})", import.from, import.line, import.path)?;
                }
                Ok(())
            }
            Violation::Circle { files, ties } => {
                writeln!(f, "circle of {} files: {}", files.len(), files.join(", "))?;
                for tie in ties {
                    writeln!(f, "  {}:{} -> {} ({})", tie.from, tie.line, tie.to, tie.path)?;
                }
                Ok(())
            }
        }
    }
}

/// Reads the imports of every file built outside tests and holds them against the table.
fn check(tree: &BTreeMap<String, String>, table: &RoomTable) -> Result<Report, String> {
    let modules = ModuleTree::build(tree)?;
    let imports = modules.imports();
    let mut violations = Vec::new();

    let mut by_file_and_room: BTreeMap<(String, String), Vec<Import>> = BTreeMap::new();
    let mut room_arrows = BTreeSet::new();
    for import in &imports {
        let (from_room, to_room) = (room_of(&import.from), room_of(&import.to));
        if from_room == to_room {
            continue;
        }
        room_arrows.insert((from_room.clone(), to_room.clone()));
        if !table.allows(&from_room, &to_room) {
            by_file_and_room.entry((import.from.clone(), to_room)).or_default().push(import.clone());
        }
    }
    for ((from, to_room), imports) in by_file_and_room {
        let from_room = room_of(&from);
        let allowed = table.may_import.get(&from_room).map(|set| set.iter().cloned().collect()).unwrap_or_default();
        violations.push(Violation::RoomArrow { from_room, to_room, allowed, imports });
    }

    // Circles: an arrow into an enclosing module's file is that module's own, and a name only
    // handed on is the module's face; neither ties files into a circle.
    let closing: Vec<&Import> =
        imports.iter().filter(|import| !import.only_hands_on && !modules.encloses(&import.to, &import.from)).collect();
    let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for import in &closing {
        edges.entry(import.from.as_str()).or_default().push(import.to.as_str());
    }
    let nodes: Vec<&str> = modules.files.keys().map(String::as_str).collect();
    for component in strongly_connected(&nodes, &edges) {
        if component.len() < 2 {
            continue;
        }
        let mut files: Vec<String> = component.iter().map(|file| file.to_string()).collect();
        files.sort();
        let ties = closing
            .iter()
            .filter(|import| component.contains(&import.from.as_str()) && component.contains(&import.to.as_str()))
            .map(|import| (*import).clone())
            .collect();
        violations.push(Violation::Circle { files, ties });
    }
    Ok(Report {
        files_checked: modules.files.len(),
        files_left_out: tree.len() - modules.files.len(),
        imports: imports.len(),
        room_arrows,
        violations,
    })
}

/// Tarjan's strongly connected components, each in no particular order.
fn strongly_connected<'a>(nodes: &[&'a str], edges: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a, 'e> {
        edges: &'e BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(state: &mut State<'a, '_>, node: &'a str) {
        let index = state.index.len();
        state.index.insert(node, index);
        state.low.insert(node, index);
        state.stack.push(node);
        state.on_stack.insert(node);
        for &next in state.edges.get(node).map(Vec::as_slice).unwrap_or_default() {
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member);
                if member == node {
                    break;
                }
            }
            state.components.push(component);
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for &node in nodes {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.components
}

// ---- the module tree ------------------------------------------------------------------------

/// The crates whose roots are in `src/`, by the name other code uses for them.
const CRATES: &[(&str, &str)] = &[("llamay", "src/lib.rs"), ("llamay_grammar", "src/grammar/lib.rs"), ("main", "src/main.rs")];

/// A module: its crate and its path inside it (`["api", "ollama"]`).
type ModulePath = (&'static str, Vec<String>);

struct ModuleTree {
    /// Each file built outside tests, with its module and what it walked to.
    files: BTreeMap<String, (ModulePath, Walked)>,
    /// Every module (inline ones too) and the file it is written in.
    modules: BTreeMap<ModulePath, String>,
    /// `pub use llamay_grammar as grammar` in a crate root: that module is another crate.
    aliases: BTreeMap<ModulePath, &'static str>,
}

impl ModuleTree {
    fn build(tree: &BTreeMap<String, String>) -> Result<ModuleTree, String> {
        let mut modules_tree =
            ModuleTree { files: BTreeMap::new(), modules: BTreeMap::new(), aliases: BTreeMap::new() };
        let mut pending: Vec<(String, ModulePath)> = CRATES
            .iter()
            .filter(|(_, root)| tree.contains_key(*root))
            .map(|(name, root)| (root.to_string(), (*name, Vec::new())))
            .collect();
        while let Some((file, module)) = pending.pop() {
            let text = &tree[&file];
            let walked = walk(&lex(text));
            let is_root = module.1.is_empty();
            // A `mod name;` is in `dir/name.rs` or `dir/name/mod.rs`, where `dir` is the file's own
            // folder for a `mod.rs` or a crate root, else the folder named as the file.
            let dir = if is_root || file.ends_with("/mod.rs") {
                file.rsplit_once('/').map_or(String::new(), |(dir, _)| dir.to_string())
            } else {
                file.trim_end_matches(".rs").to_string()
            };
            modules_tree.modules.insert(module.clone(), file.clone());
            for declared in &walked.modules {
                let mut path = module.1.clone();
                path.extend(declared.scope.iter().cloned());
                path.push(declared.name.clone());
                let child = (module.0, path);
                if declared.inline {
                    modules_tree.modules.insert(child, file.clone());
                    continue;
                }
                let folder = std::iter::once(dir.clone()).chain(declared.scope.iter().cloned()).collect::<Vec<_>>().join("/");
                let candidates = [format!("{folder}/{}.rs", declared.name), format!("{folder}/{}/mod.rs", declared.name)];
                let found = candidates
                    .iter()
                    .find(|candidate| tree.contains_key(*candidate))
                    .ok_or_else(|| format!("{file}:{}: `mod {};` is in neither {}", declared.line, declared.name, candidates.join(" nor ")))?;
                pending.push((found.clone(), child));
            }
            if is_root {
                for alias in &walked.aliases {
                    if let Some((name, _)) = CRATES.iter().find(|(name, _)| *name == alias.0) {
                        modules_tree.aliases.insert((module.0, vec![alias.1.clone()]), name);
                    }
                }
            }
            if let Some(line) = walked.path_attribute {
                return Err(format!("{file}:{line}: #[path] is not followed by this check (a module is a folder)"));
            }
            modules_tree.files.insert(file, (module, walked));
        }
        Ok(modules_tree)
    }

    /// Every path of every checked file that names a module of ours, resolved to its file.
    fn imports(&self) -> Vec<Import> {
        let mut imports = Vec::new();
        for (file, ((krate, own), walked)) in &self.files {
            for path in &walked.paths {
                let mut scope = own.clone();
                scope.extend(path.scope.iter().cloned());
                let Some(target) = self.resolve(krate, &scope, &path.segments) else { continue };
                let to = &self.modules[&target];
                if to != file {
                    imports.push(Import {
                        from: file.clone(),
                        line: path.line,
                        to: to.clone(),
                        path: path.segments.join("::"),
                        only_hands_on: walked.only_hands_on(path),
                    });
                }
            }
        }
        imports
    }

    /// The deepest module `segments` names, seen from module `scope` of crate `krate`.
    fn resolve(&self, krate: &'static str, scope: &[String], segments: &[String]) -> Option<ModulePath> {
        let first = segments.first()?.as_str();
        let (mut krate, mut path, mut rest) = match first {
            "crate" => (krate, Vec::new(), &segments[1..]),
            "self" => (krate, scope.to_vec(), &segments[1..]),
            "super" => {
                let mut path = scope.to_vec();
                let supers = segments.iter().take_while(|s| *s == "super").count();
                for _ in 0..supers {
                    path.pop()?;
                }
                (krate, path, &segments[supers..])
            }
            name => match CRATES.iter().find(|(crate_name, _)| *crate_name == name && *crate_name != "main") {
                Some((crate_name, _)) => (*crate_name, Vec::new(), &segments[1..]),
                None => {
                    let mut child = scope.to_vec();
                    child.push(name.to_string());
                    if !self.modules.contains_key(&(krate, child.clone())) {
                        return None;
                    }
                    (krate, child, &segments[1..])
                }
            },
        };
        while let Some((segment, tail)) = rest.split_first() {
            let mut next = path.clone();
            next.push(segment.clone());
            if let Some(other) = self.aliases.get(&(krate, next.clone())) {
                (krate, path) = (other, Vec::new());
            } else if self.modules.contains_key(&(krate, next.clone())) {
                path = next;
            } else {
                break;
            }
            rest = tail;
        }
        Some((krate, path))
    }

    /// Whether `outer` is the file of a module that encloses `inner`'s (its parent, its
    /// parent's parent, or its crate root).
    fn encloses(&self, outer: &str, inner: &str) -> bool {
        let (Some(((outer_crate, outer_path), _)), Some(((inner_crate, inner_path), _))) = (self.files.get(outer), self.files.get(inner)) else {
            return false;
        };
        outer_crate == inner_crate && outer_path.len() < inner_path.len() && inner_path.starts_with(outer_path)
    }
}

// ---- reading one file -----------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of Rust source that matter here, each with its line; comments, string, char and
/// number literals and lifetimes are dropped.
fn lex(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    // Skips a quoted literal starting at the quote `chars[i]`; returns the index after it.
    let quoted = |mut i: usize, line: &mut usize, raw_hashes: Option<usize>| -> usize {
        let close = chars[i];
        i += 1;
        while i < chars.len() {
            let c = chars[i];
            if c == '\n' {
                *line += 1;
            }
            if c == '\\' && raw_hashes.is_none() {
                if at(i + 1) == '\n' {
                    *line += 1;
                }
                i += 2;
                continue;
            }
            if c == close {
                let hashes = raw_hashes.unwrap_or(0);
                if (1..=hashes).all(|k| at(i + k) == '#') {
                    return i + 1 + hashes;
                }
            }
            i += 1;
        }
        i
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '/' if at(i + 1) == '/' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if at(i + 1) == '*' => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && at(i + 1) == '*' {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && at(i + 1) == '/' {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if chars[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            '"' => i = quoted(i, &mut line, None),
            '\'' => {
                if at(i + 1) == '\\' {
                    // An escaped char: '\n', '\'', '\u{..}'.
                    let mut j = i + 3;
                    while j < chars.len() && chars[j] != '\'' {
                        j += 1;
                    }
                    i = j + 1;
                } else if at(i + 2) == '\'' {
                    i += 3;
                } else {
                    // A lifetime or a label: the name after it is no path.
                    i += 1;
                    while at(i).is_alphanumeric() || at(i) == '_' {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() => {
                while at(i).is_alphanumeric() || at(i) == '_' || (at(i) == '.' && at(i + 1).is_ascii_digit()) {
                    i += 1;
                }
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let raw = matches!(word.as_str(), "r" | "br" | "cr");
                if matches!(word.as_str(), "b" | "c" | "br" | "cr" | "r") && (at(i) == '"' || (word == "b" && at(i) == '\'')) {
                    i = quoted(i, &mut line, raw.then_some(0));
                } else if raw && at(i) == '#' && (at(i + 1) == '#' || at(i + 1) == '"') {
                    let hashes = (i..).take_while(|&k| at(k) == '#').count();
                    i = quoted(i + hashes, &mut line, Some(hashes));
                } else if word == "r" && at(i) == '#' {
                    // A raw identifier, `r#type`.
                    let start = i + 1;
                    i += 1;
                    while at(i).is_alphanumeric() || at(i) == '_' {
                        i += 1;
                    }
                    tokens.push((Token::Ident(chars[start..i].iter().collect()), line));
                } else {
                    tokens.push((Token::Ident(word), line));
                }
            }
            ':' if at(i + 1) == ':' => {
                tokens.push((Token::PathSep, line));
                i += 2;
            }
            c => {
                tokens.push((Token::Punct(c), line));
                i += 1;
            }
        }
    }
    tokens
}

/// A `mod` declared in a file, inside the inline modules of `scope`.
#[derive(Debug)]
struct DeclaredModule {
    scope: Vec<String>,
    name: String,
    inline: bool,
    line: usize,
}

/// A path written in a file, inside the inline modules of `scope`.
#[derive(Debug)]
struct WrittenPath {
    scope: Vec<String>,
    segments: Vec<String>,
    line: usize,
    /// For a `pub use`, the name it hands on (`*` for a glob).
    hands_on: Option<String>,
}

#[derive(Debug, Default)]
struct Walked {
    modules: Vec<DeclaredModule>,
    paths: Vec<WrittenPath>,
    /// `use some_crate as name;`: (crate, name).
    aliases: Vec<(String, String)>,
    path_attribute: Option<usize>,
    /// Every name the code uses outside `use` items.
    names: BTreeSet<String>,
}

impl Walked {
    /// Whether `path` is only handed on: a `pub use` of a name this file does not use itself.
    fn only_hands_on(&self, path: &WrittenPath) -> bool {
        path.hands_on.as_ref().is_some_and(|name| name == "*" || !self.names.contains(name))
    }
}

/// The modules and paths of one file's tokens, test-only items left out.
fn walk(tokens: &[(Token, usize)]) -> Walked {
    let mut walked = Walked::default();
    // Inline modules open around here, with the brace depth inside each.
    let mut scope: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let ident = |i: usize| match tokens.get(i) {
        Some((Token::Ident(name), _)) => Some(name.as_str()),
        _ => None,
    };
    let punct = |i: usize, c: char| matches!(tokens.get(i), Some((Token::Punct(p), _)) if *p == c);
    let scope_names = |scope: &[(String, usize)]| scope.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>();
    while i < tokens.len() {
        let (token, line) = &tokens[i];
        match token {
            Token::Punct('#') => {
                let inner = punct(i + 1, '!');
                let open = if inner { i + 2 } else { i + 1 };
                if !punct(open, '[') {
                    i += 1;
                    continue;
                }
                let close = matching(tokens, open);
                let attribute = &tokens[open + 1..close.min(tokens.len())];
                if matches!(attribute.first(), Some((Token::Ident(name), _)) if name == "path") {
                    walked.path_attribute.get_or_insert(*line);
                }
                if needs_test(attribute) {
                    if inner {
                        // `#![cfg(test)]`: the whole module is test code.
                        return Walked::default();
                    }
                    i = skip_item(tokens, close + 1);
                } else {
                    // Other attributes are read as code: `value_parser = super::run::parse`.
                    i = open + 1;
                }
            }
            Token::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Token::Punct('}') => {
                if scope.last().is_some_and(|(_, inside)| *inside == depth) {
                    scope.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Token::Ident(word) if word == "mod" && ident(i + 1).is_some() => {
                let name = ident(i + 1).unwrap_or_default().to_string();
                let inline = punct(i + 2, '{');
                walked.modules.push(DeclaredModule { scope: scope_names(&scope), name: name.clone(), inline, line: *line });
                if inline {
                    depth += 1;
                    scope.push((name, depth));
                    i += 3;
                } else {
                    i += 2;
                }
            }
            // `use<'a>` in `impl Trait + use<'a>` is no import.
            Token::Ident(word) if word == "use" && !punct(i + 1, '<') => {
                let mut end = i + 1;
                while end < tokens.len() && !punct(end, ';') {
                    end += 1;
                }
                let mut trees = Vec::new();
                use_tree(&tokens[i + 1..end], &mut 0, Vec::new(), &mut trees);
                let public = is_public(tokens, i);
                for used in trees {
                    let name = used.alias.clone().or_else(|| used.segments.last().cloned()).unwrap_or_default();
                    let hands_on = public.then(|| if used.glob { "*".to_string() } else { name });
                    if let (Some(alias), [single]) = (used.alias, used.segments.as_slice()) {
                        walked.aliases.push((single.clone(), alias));
                    }
                    walked.paths.push(WrittenPath { scope: scope_names(&scope), segments: used.segments, line: used.line, hands_on });
                }
                i = end + 1;
            }
            Token::Ident(first) if tokens.get(i + 1).is_some_and(|(t, _)| *t == Token::PathSep) => {
                // Not the middle of a path (`<T as U>::x`), `$crate`, or `pub(in crate::llm)`.
                let in_visibility = i > 1 && tokens[i - 2].0 == Token::Punct('(') && matches!(&tokens[i - 1].0, Token::Ident(w) if w == "in");
                let not_a_start = in_visibility || (i > 0 && matches!(tokens[i - 1].0, Token::PathSep | Token::Punct('$')));
                let mut segments = vec![first.clone()];
                let mut j = i + 1;
                while tokens.get(j).is_some_and(|(t, _)| *t == Token::PathSep) {
                    match ident(j + 1) {
                        Some(next) => {
                            segments.push(next.to_string());
                            j += 2;
                        }
                        None => break,
                    }
                }
                walked.names.extend(segments.iter().cloned());
                if !not_a_start {
                    walked.paths.push(WrittenPath { scope: scope_names(&scope), segments, line: *line, hands_on: None });
                }
                i = j;
            }
            Token::Ident(name) => {
                walked.names.insert(name.clone());
                i += 1;
            }
            _ => i += 1,
        }
    }
    walked
}

/// Whether the `use` at `at` is `pub`, `pub(crate)`, `pub(super)` or `pub(in ..)`.
fn is_public(tokens: &[(Token, usize)], at: usize) -> bool {
    let mut before = at.checked_sub(1);
    if let Some(close) = before.filter(|&b| tokens[b].0 == Token::Punct(')')) {
        before = (0..close).rev().find(|&b| tokens[b].0 == Token::Punct('(')).and_then(|open| open.checked_sub(1));
    }
    before.is_some_and(|b| matches!(&tokens[b].0, Token::Ident(word) if word == "pub"))
}

/// The index of the bracket closing the one at `open`.
fn matching(tokens: &[(Token, usize)], open: usize) -> usize {
    let mut depth = 0i32;
    for (index, (token, _)) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return index;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// Whether a `cfg` attribute's condition holds only in test builds: `cfg(test)`,
/// `cfg(all(test, ..))`; `cfg(any(test, ..))` and `cfg(not(test))` also hold in others.
fn needs_test(attribute: &[(Token, usize)]) -> bool {
    fn condition(tokens: &[(Token, usize)], at: usize) -> (bool, usize) {
        match tokens.get(at) {
            Some((Token::Ident(word), _)) if word == "all" || word == "any" || word == "not" => {
                let close = matching(tokens, at + 1);
                let mut parts = Vec::new();
                let mut next = at + 2;
                while next < close {
                    let (needs, end) = condition(tokens, next);
                    parts.push(needs);
                    next = end + 1; // past the comma
                }
                let needs = match word.as_str() {
                    "all" => parts.iter().any(|needs| *needs),
                    "any" => !parts.is_empty() && parts.iter().all(|needs| *needs),
                    _ => false,
                };
                (needs, close + 1)
            }
            Some((Token::Ident(word), _)) => {
                // `test`, `unix`, `feature = "x"` (the string is not a token).
                let mut end = at + 1;
                while end < tokens.len() && !matches!(tokens[end].0, Token::Punct(',' | ')')) {
                    end += 1;
                }
                (word == "test", end)
            }
            _ => (false, at + 1),
        }
    }
    match attribute {
        [(Token::Ident(cfg), _), (Token::Punct('('), _), ..] if cfg == "cfg" => condition(attribute, 2).0,
        _ => false,
    }
}

/// The index after the item, field or statement that starts at `start`: at its `;`, at the `}`
/// closing its body, at a `,` ending a field, or before the bracket closing what encloses it.
fn skip_item(tokens: &[(Token, usize)], start: usize) -> usize {
    // Past further attributes and a visibility, to the word that says what it is.
    let mut word = start;
    loop {
        match &tokens.get(word).map(|(token, _)| token) {
            Some(Token::Punct('#')) => word = matching(tokens, word + 1) + 1,
            Some(Token::Ident(name)) if name == "pub" => {
                word += 1;
                if matches!(tokens.get(word), Some((Token::Punct('('), _))) {
                    word = matching(tokens, word) + 1;
                }
            }
            Some(Token::Ident(name)) if matches!(name.as_str(), "async" | "unsafe" | "extern") => word += 1,
            _ => break,
        }
    }
    let is_item = matches!(
        tokens.get(word),
        Some((Token::Ident(name), _)) if matches!(name.as_str(), "fn" | "impl" | "struct" | "enum" | "mod" | "use" | "trait" | "type" | "const" | "static" | "macro_rules")
    );
    let mut depth = 0i32;
    let mut i = start;
    while i < tokens.len() {
        match tokens[i].0 {
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']') => depth -= 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            Token::Punct(';') if depth == 0 => return i + 1,
            Token::Punct(',') if depth == 0 && !is_item => return i + 1,
            _ => {}
        }
        if depth < 0 {
            return i;
        }
        i += 1;
    }
    i
}

/// One path of a `use` tree, with its `as` name if it has one and the line of its last name.
struct UsedPath {
    segments: Vec<String>,
    alias: Option<String>,
    line: usize,
    glob: bool,
}

/// The paths a `use` tree names (`a::{b, c::{self, D}}` -> a::b, a::c, a::c::D); a path from
/// the global root (`::std`) is left out.
fn use_tree(tokens: &[(Token, usize)], at: &mut usize, prefix: Vec<String>, out: &mut Vec<UsedPath>) {
    let mut segments = prefix;
    if *at < tokens.len() && tokens[*at].0 == Token::PathSep {
        if segments.is_empty() {
            // `use ::std::..`: another crate.
            while *at < tokens.len() && !matches!(tokens[*at].0, Token::Punct(',' | '}')) {
                *at += 1;
            }
            return;
        }
        *at += 1;
    }
    while *at < tokens.len() {
        match &tokens[*at].0 {
            Token::Ident(word) if word == "as" => {
                let (alias, line) = match tokens.get(*at + 1) {
                    Some((Token::Ident(alias), line)) => (Some(alias.clone()), *line),
                    _ => (None, tokens[*at].1),
                };
                *at += 2;
                out.push(UsedPath { segments, alias, line, glob: false });
                return;
            }
            Token::Ident(word) => {
                if word != "self" || segments.is_empty() {
                    segments.push(word.clone());
                }
                let line = tokens[*at].1;
                *at += 1;
                if tokens.get(*at).is_some_and(|(t, _)| *t == Token::PathSep) {
                    *at += 1;
                } else if !tokens.get(*at).is_some_and(|(t, _)| matches!(t, Token::Ident(word) if word == "as")) {
                    out.push(UsedPath { segments, alias: None, line, glob: false });
                    return;
                }
            }
            Token::Punct('*') => {
                out.push(UsedPath { segments, alias: None, line: tokens[*at].1, glob: true });
                *at += 1;
                return;
            }
            Token::Punct('{') => {
                *at += 1;
                loop {
                    match tokens.get(*at).map(|(t, _)| t) {
                        None => return,
                        Some(Token::Punct('}')) => {
                            *at += 1;
                            return;
                        }
                        Some(Token::Punct(',')) => *at += 1,
                        Some(_) => use_tree(tokens, at, segments.clone(), out),
                    }
                }
            }
            _ => {
                *at += 1;
                return;
            }
        }
    }
}
