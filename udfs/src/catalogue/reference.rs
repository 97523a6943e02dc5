//! The catalogue as a Markdown page: `docs/reference/site-functions.md`,
//! checked by a test to be current.

use super::*;

/// The catalogue as a Markdown page (`docs/reference/site-functions.md`,
/// checked by a test to be current).
pub fn reference_markdown() -> String {
    let yes = |b: bool| if b { "yes" } else { "" };
    let mut page = String::from(
        "# What a site runs: the function catalogue\n\n\
         Generated from `udfs/src/catalogue.rs` (run `FEDSQL_BLESS=1 cargo test -p fedsql-udfs catalogue` \
         after changing it). A site runs no aggregate and no scalar function that is not listed here, \
         in process and at workers alike; see [the threat model](../security/threat-model.md). \
         [The function reference](functions.md) documents fedsql's own functions.\n\n\
         ## Aggregates\n\n\
         | aggregate | inputs count towards k when | extremes | identifying | kind | model parameters | cells held to k | sized by argument |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for a in AGGREGATES {
        page.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} | {} |\n",
            a.name,
            if a.adds_inputs {
                "non-NULL and non-zero"
            } else {
                "non-NULL"
            },
            yes(a.extremes),
            yes(a.identifying),
            match a.privacy {
                Privacy::Exact => "exact",
                Privacy::Dp => "DP",
                Privacy::Secure => "secure sum",
                Privacy::SecureDp => "DP, secure sum",
            },
            a.model_leading
                .map(|l| format!("arguments after the first {l}"))
                .unwrap_or_default(),
            yes(a.cells.is_some()),
            a.sized_by
                .map(|i| format!("argument {} (at most {MAX_BINS})", i + 1))
                .unwrap_or_default(),
        ));
    }
    page.push_str(
        "\n## Profile groups\n\n\
         What a name in an analyst profile's `functions` allow-list (`[analysts.NAME]` in a \
         worker's TOML) admits. A site sees encoders, not the table function that made them: \
         a name admits these aggregates whoever writes the query. A single aggregate's name \
         admits that aggregate.\n\n| name | kind | admits |\n|---|---|---|\n",
    );
    for (kind, list) in [
        ("group", groups::GROUPS),
        ("table function", groups::TABLE_FUNCTIONS),
    ] {
        for (name, members) in list {
            page.push_str(&format!(
                "| `{name}` | {kind} | {} |\n",
                members
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    page.push_str(
        "\n## Scalar functions\n\n\
         Under a disclosure policy a site evaluates every one of them NULL-on-error (a row it \
         fails on, or panics on, gives NULL), so whether a query fails never depends on one \
         row; the table says which are known to fail on some values.\n\n\
         | function | can fail on data |\n|---|---|\n",
    );
    let mut scalars: Vec<&Scalar> = SCALARS.iter().collect();
    scalars.sort_by_key(|s| s.name);
    for s in scalars {
        page.push_str(&format!(
            "| `{}` | {} |\n",
            s.name,
            match s.on_data {
                OnData::Never => "no",
                OnData::NullOnError => "yes: NULL-on-error",
            }
        ));
    }
    page
}
