//! The field reference of `docs/configuration.md`, generated from the field table and the
//! doc comments (through the schema) so the documentation cannot drift from the code.

use super::fields::{self, FieldKind, CONFIG_FILE_VAR, LOG_VAR};
use super::schema::schema_value;
use super::Config;

/// The documentation page holding the generated table, relative to the repository root.
pub const DOC_PATH: &str = "docs/configuration.md";
/// Markers around the generated block in the page.
pub const BEGIN_MARKER: &str =
    "<!-- BEGIN GENERATED FIELD TABLE: edit rust/distprof/src/config, not here -->";
pub const END_MARKER: &str = "<!-- END GENERATED FIELD TABLE -->";

/// The Markdown block between the markers (without them), ending in a newline.
pub fn field_table_markdown() -> String {
    let schema = schema_value();
    let defaults = Config::default().to_json_map();
    let mut out = String::new();
    out.push_str("| field | environment variable | type | default | allowed | meaning |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for spec in fields::FIELDS {
        let doc = schema["properties"][spec.name]["description"]
            .as_str()
            .unwrap_or_default();
        let default = if spec.name == "output_dir" {
            "`$TMPDIR/xla_dist_prof`".to_string()
        } else {
            format!("`{}`", defaults[spec.name])
        };
        let allowed = match spec.kind {
            FieldKind::Unsigned { min, max, .. } => format!("{min} ..= {max}"),
            FieldKind::Float { min, max } => format!("{min} ..= {max}"),
            FieldKind::Bool => "true, false (env: 1/0, true/false, yes/no, on/off)".to_string(),
            FieldKind::Text => "text".to_string(),
            FieldKind::Choice(names) => names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let meaning = doc.replace('\n', " ").replace('|', "\\|");
        let scope = match spec.scope {
            fields::Scope::Cluster => "",
            fields::Scope::Node => " *(node-local)*",
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {default} | {allowed} | {meaning}{scope} |\n",
            spec.name,
            spec.env,
            spec.kind.describe_short(),
        ));
    }
    out.push('\n');
    out.push_str("| variable | meaning |\n|---|---|\n");
    out.push_str(&format!(
        "| `{CONFIG_FILE_VAR}` | Path of the JSON configuration file (the middle layer). Empty or unset: no file. |\n"
    ));
    out.push_str(&format!(
        "| `{LOG_VAR}` | `tracing` filter that overrides `log_filter` when logging starts; read even when the configuration is invalid, so loading itself can be debugged. |\n"
    ));
    out
}

/// The page with its generated block replaced by the current table, or `None` when the
/// markers are missing.
pub fn render_page(page: &str) -> Option<String> {
    let start = page.find(BEGIN_MARKER)? + BEGIN_MARKER.len();
    let end = page[start..].find(END_MARKER)? + start;
    Some(format!(
        "{}\n{}{}",
        &page[..start],
        field_table_markdown(),
        &page[end..]
    ))
}

impl FieldKind {
    /// The type column of the docs.
    fn describe_short(&self) -> String {
        match self {
            FieldKind::Choice(_) => "string".to_string(),
            other => other.describe(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn checked_in_docs_are_current_and_list_every_field_and_variable() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(DOC_PATH);
        let mut page = std::fs::read_to_string(&path).unwrap_or_default();
        let fresh = render_page(&page).unwrap_or_else(|| {
            panic!("{DOC_PATH} lacks the markers {BEGIN_MARKER} / {END_MARKER}")
        });
        if std::env::var_os("DISTPROF_BLESS").is_some() {
            crate::atomic_file::write(&path, fresh.as_bytes()).unwrap();
            page = fresh.clone();
        }
        assert!(
            page == fresh,
            "the field table in {DOC_PATH} is stale; regenerate it with\n  DISTPROF_BLESS=1 cargo nextest run -p distprof config::"
        );
        for var in fields::all_env_vars() {
            assert!(
                page.contains(&format!("`{var}`")),
                "{DOC_PATH} does not mention {var}"
            );
        }
        for spec in fields::FIELDS {
            assert!(
                page.contains(&format!("| `{}` |", spec.name)),
                "{DOC_PATH} does not list {}",
                spec.name
            );
        }
    }

    #[test]
    fn table_has_one_row_per_field() {
        let table = field_table_markdown();
        let rows = table.lines().filter(|l| l.starts_with("| `")).count();
        assert_eq!(rows, fields::FIELDS.len() + 2);
        assert!(table.contains("| `probe_cadence_us` | `XLA_PROBE_CADENCE_US` | integer (u64) | `40000` | 1000 ..= 10000000 |"), "{table}");
    }

    #[test]
    fn render_replaces_only_the_block() {
        let page = format!("intro\n{BEGIN_MARKER}\nold\n{END_MARKER}\noutro\n");
        let out = render_page(&page).unwrap();
        assert!(out.starts_with(&format!("intro\n{BEGIN_MARKER}\n| field |")));
        assert!(out.ends_with(&format!("{END_MARKER}\noutro\n")));
        assert!(!out.contains("old"));
        assert_eq!(render_page("no markers"), None);
    }
}
