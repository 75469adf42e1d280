//! docs/configuration.md documents every section and key of the configuration file, every URI
//! parameter, and the environment variable of each, as the code accepts them.
//!
//! The lists come from the code, from the same lists the loader checks keys against
//! (`crates/api/src/config.rs`, `check` and `ResolverSettings::from_pairs`):
//! - the transport sections: `Scheme::ALL`;
//! - each transport's keys, which are also its URI parameters: `IpcConfig::KEYS`
//!   (`crates/transport/src/ipc/mod.rs`) and `NetConfig::keys`
//!   (`crates/transport/src/net/config.rs`);
//! - the `[resolver]` keys: `peregrine::config::RESOLVER_KEYS`.
//!
//! A key the code accepts without a row in the document fails here, and so does a row for a key
//! the code no longer accepts. The worked example must load and say what its URIs say.

use peregrine::config::RESOLVER_KEYS;
use peregrine::{Config, Scheme};
use peregrine_transport::ipc::dir::SHM_DIR_VAR;
use peregrine_transport::ipc::IpcConfig;
use peregrine_transport::net::NetConfig;
use peregrine_transport::Uri;

const DOC: &str = include_str!("../../../docs/configuration.md");

/// The keys of a transport's section, which are its URI parameters.
fn transport_keys(scheme: Scheme) -> &'static [&'static str] {
    match scheme {
        Scheme::Ipc => &IpcConfig::KEYS,
        s => NetConfig::keys(s),
    }
}

/// The level of a Markdown heading (`## Title`: 2), if `line` is one.
fn heading_level(line: &str) -> Option<usize> {
    let level = line.bytes().take_while(|&b| b == b'#').count();
    (level > 0 && line[level..].starts_with(' ')).then_some(level)
}

/// The text under the one heading that contains `marker`, down to the next heading of the same
/// or a higher level. Lines in fenced code blocks are never headings.
fn section(marker: &str) -> String {
    let mut out = String::new();
    let mut level: Option<usize> = None;
    let mut found = 0;
    let mut fenced = false;
    for line in DOC.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let heading = if fenced { None } else { heading_level(line) };
        if let Some(h) = heading {
            if level.is_some_and(|l| h <= l) {
                level = None;
            }
            if line.contains(marker) {
                found += 1;
                level = Some(h);
            }
        }
        if level.is_some() {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert_eq!(
        found, 1,
        "docs/configuration.md must have exactly one heading containing {marker}"
    );
    out
}

/// The names in backquotes in the first cell of every table row of `text`.
fn first_cells(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with("| `") {
            continue;
        }
        let cell = line[1..].split('|').next().unwrap_or("");
        names.extend(cell.split('`').skip(1).step_by(2).map(str::to_string));
    }
    names
}

/// The lines of the first fenced block of language `lang` in `text`.
fn block(text: &str, lang: &str) -> String {
    let open = format!("```{lang}");
    let mut lines = text.lines().skip_while(|l| l.trim() != open);
    assert!(lines.next().is_some(), "no ```{lang} block in the section");
    lines
        .take_while(|l| l.trim() != "```")
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn every_transport_key_has_a_row_with_its_variable() {
    for scheme in Scheme::ALL {
        let name = scheme.name();
        let text = section(&format!("`[{name}]`"));
        assert!(
            text.contains(&format!("`{name}://")),
            "docs/configuration.md, section [{name}]: the heading or text should name {name}://"
        );
        let keys = transport_keys(scheme);
        assert!(!keys.is_empty(), "the code lists no keys for [{name}]");
        for key in keys {
            assert!(
                text.contains(&format!("| `{key}` |")),
                "docs/configuration.md, section [{name}]: no table row for `{key}` (accepted keys: {})",
                keys.join(", ")
            );
            let var = format!(
                "`PEREGRINE_{}_{}`",
                name.to_ascii_uppercase(),
                key.to_ascii_uppercase()
            );
            assert!(
                text.contains(&var),
                "docs/configuration.md, section [{name}]: {var} is not named"
            );
        }
        for documented in first_cells(&text) {
            assert!(
                keys.contains(&documented.as_str()),
                "docs/configuration.md, section [{name}]: a row for `{documented}`, which [{name}] does not accept (accepted keys: {})",
                keys.join(", ")
            );
        }
    }
}

#[test]
fn every_resolver_key_has_a_row_with_its_variable() {
    let text = section("`[resolver]`");
    for key in RESOLVER_KEYS {
        assert!(
            text.contains(&format!("| `{key}` |")),
            "docs/configuration.md, section [resolver]: no table row for `{key}`"
        );
        let var = format!("`PEREGRINE_RESOLVER_{}`", key.to_ascii_uppercase());
        assert!(
            text.contains(&var),
            "docs/configuration.md, section [resolver]: {var} is not named"
        );
    }
    for documented in first_cells(&text) {
        assert!(
            RESOLVER_KEYS.contains(&documented.as_str()),
            "docs/configuration.md, section [resolver]: a row for `{documented}`, which [resolver] does not accept (accepted keys: {})",
            RESOLVER_KEYS.join(", ")
        );
    }
}

#[test]
fn the_topics_section_is_documented() {
    // The sections `Config::from_toml` accepts: one per scheme (checked above), [resolver]
    // (checked above) and [topics].
    let text = section("`[topics]`");
    assert!(text.contains("Config::with_topic"), "{text}");
}

#[test]
fn the_environment_variables_are_documented() {
    let vars = [
        // crates/api/src/context.rs (`Context::from_env`) and crates/api/src/config.rs
        // (`Config::with_env`).
        "PEREGRINE_CONFIG",
        "PEREGRINE_LOSS",
        "PEREGRINE_<TRANSPORT>_<KEY>",
        "PEREGRINE_RESOLVER_<KEY>",
        // crates/transport/src/ipc/dir.rs.
        SHM_DIR_VAR,
        // Crates this one does not depend on, so named here: crates/market-data/src/backbone.rs
        // (`KEY_ENV`), crates/cli/src/cmd/client.rs and bindings/python/src/md/consumer.rs,
        // crates/bench/src/results.rs, crates/testkit/src/lib.rs (`REQUIRE_TOOLS_VAR`).
        "PEREGRINE_MD_KEY",
        "PEREGRINE_MD_TOKEN",
        "PEREGRINE_RESULTS",
        "PEREGRINE_REQUIRE_TOOLS",
    ];
    for var in vars {
        assert!(
            DOC.contains(&format!("`{var}`")),
            "docs/configuration.md does not name `{var}`"
        );
    }
}

#[test]
fn the_worked_example_loads_and_says_what_its_uris_say() {
    let text = section("Worked example");
    let file = block(&text, "toml");
    let config = Config::from_toml(&file, "docs/configuration.md, worked example")
        .unwrap_or_else(|e| panic!("the worked example is refused: {e}"));
    let uris = block(&text, "text");
    let mut checked = Vec::new();
    for line in uris.lines().map(str::trim).filter(|l| l.contains("://")) {
        let given = Uri::parse(line).unwrap_or_else(|e| panic!("{e}"));
        let valid = match given.scheme {
            Scheme::Ipc => IpcConfig::from_uri(&given).map(drop),
            _ => NetConfig::from_uri(&given).map(drop),
        };
        if let Err(e) = valid {
            panic!("the worked example's {line} is refused: {e}");
        }
        // The file's defaults, applied to the bare address, give exactly these parameters.
        let bare = format!("{}://{}", given.scheme.name(), given.address);
        let applied = config.apply(&bare).unwrap_or_else(|e| panic!("{e}"));
        let mut got = Uri::parse(&applied)
            .unwrap_or_else(|e| panic!("{e}"))
            .params;
        let mut want = given.params.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{line}: the worked example gives {applied}");
        checked.push(given.scheme);
    }
    for scheme in Scheme::ALL {
        assert!(
            checked.contains(&scheme),
            "the worked example has no {}:// URI",
            scheme.name()
        );
    }
}
