//! The documentation of one SQL function fedsql adds: what it computes, how
//! it is called, its arguments and options (with their defaults), what it
//! returns, and what leaves each site when it runs.
//!
//! Every aggregate of this crate carries one ([`crate::catalogue`] keys it
//! by name beside the aggregate's other facts), and so does every table
//! function fedsql registers. From one [`FunctionDoc`] come DataFusion's
//! [`Documentation`] (what `SHOW FUNCTIONS` and
//! `information_schema.routines` show), the REPL's `\h NAME`, and the
//! generated reference page `docs/reference/functions.md`; none of them is
//! written by hand.

use datafusion::logical_expr::{DocSection, Documentation};

/// A family of functions: one section of the reference page, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FunctionFamily {
    /// Aggregates of one column that DataFusion has no bounded form of.
    Descriptive,
    /// Matrix-valued aggregates: co-moments, covariance, normal equations.
    Matrices,
    /// Differentially private aggregates.
    Dp,
    /// Secure (maskable) sums.
    Secure,
    /// Regression models and their round aggregates.
    Models,
    /// Classical tests and summaries.
    Tests,
    /// Principal components and k-means.
    Multivariate,
    /// Survival curves and Cox models.
    Survival,
}

impl FunctionFamily {
    /// Every family, in the order of the reference page.
    pub const ALL: [FunctionFamily; 8] = [
        FunctionFamily::Descriptive,
        FunctionFamily::Matrices,
        FunctionFamily::Dp,
        FunctionFamily::Secure,
        FunctionFamily::Models,
        FunctionFamily::Tests,
        FunctionFamily::Multivariate,
        FunctionFamily::Survival,
    ];

    /// The family's heading.
    pub fn label(self) -> &'static str {
        match self {
            FunctionFamily::Descriptive => "Descriptive aggregates",
            FunctionFamily::Matrices => "Matrices",
            FunctionFamily::Dp => "Differential privacy",
            FunctionFamily::Secure => "Secure aggregation",
            FunctionFamily::Models => "Models",
            FunctionFamily::Tests => "Tests and summaries",
            FunctionFamily::Multivariate => "Multivariate analysis",
            FunctionFamily::Survival => "Survival analysis",
        }
    }

    /// One paragraph that opens the family's section.
    pub fn about(self) -> &'static str {
        match self {
            FunctionFamily::Descriptive => {
                "Ordinary aggregates whose state is a fixed number of counts. DataFusion's own \
                 bounded aggregates (`count`, `sum`, `avg`, `var`, `stddev`, `corr`, `regr_*`, \
                 `min`, `max`, ...) and sketches (`approx_distinct`, `approx_percentile_cont`, \
                 `approx_median`) run at the sites as well: [the site catalogue](site-functions.md) \
                 lists them with what each releases."
            }
            FunctionFamily::Matrices => {
                "Matrix-valued aggregates over k columns. Each site's state is the centred \
                 co-moments of its complete rows (n, the means and the centred cross products), \
                 merged with Chan et al.'s pairwise update; the result is an ordinary Arrow value \
                 (`covariance_matrix(a, b)['matrix']`)."
            }
            FunctionFamily::Dp => {
                "Aggregates whose state each site noises (discrete Laplace, pure ε-DP) before it \
                 leaves, and whose ε the site debits from its budget first. Each takes an optional \
                 last argument `epsilon` (default: the session's `fedsql.dp_epsilon`, 1). Bounds, \
                 bins and ε are constants."
            }
            FunctionFamily::Secure => {
                "Sums quantized to integers mod 2^64 that every site masks with pairwise masks, so \
                 that the coordinator learns only the total. Values outside `[lower, upper]` are \
                 clipped; the bounds are constants of the value's type."
            }
            FunctionFamily::Models => {
                "Regression models fitted from SQL as table functions. The source is a table name \
                 or a query string (its filters run at the sites); formulas are R's. Each fit is a \
                 program of federated rounds; each round is one of the round aggregates below, \
                 whose only shared input is a constant config string."
            }
            FunctionFamily::Tests => {
                "Classical tests and summaries as R computes them, with broom's `tidy()` column \
                 names. Each is one or two rounds of ordinary aggregates; the statistic and the \
                 p-value are computed on the coordinator from the merged values."
            }
            FunctionFamily::Multivariate => {
                "Principal components and k-means from merged co-moments and per-centre sums."
            }
            FunctionFamily::Survival => {
                "Kaplan–Meier curves and log-rank tests on a declared time grid, and Cox models \
                 stratified by site."
            }
        }
    }
}

/// One option of a table function's options string (`'key=value, ...'`).
#[derive(Debug, Clone, Copy)]
pub struct DocOption {
    /// The key.
    pub name: &'static str,
    /// The value when the option is not given.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// The documentation of one function (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct FunctionDoc {
    /// The section it belongs to.
    pub family: FunctionFamily,
    /// What it computes, in one or two sentences.
    pub description: &'static str,
    /// How it is called, e.g. `lm(source, formula)`.
    pub syntax: &'static str,
    /// Each argument and what it is, in order.
    pub arguments: &'static [(&'static str, &'static str)],
    /// The keys of its options string, with their defaults.
    pub options: &'static [DocOption],
    /// What it returns: the value of an aggregate, or a table function's
    /// columns.
    pub returns: &'static str,
    /// What leaves each site when it runs.
    pub releases: &'static str,
    /// A statement that runs against the demo table `clinic` (or the
    /// `lung` table of `testdata/lung_sites/`).
    pub example: &'static str,
}

impl FunctionDoc {
    /// DataFusion's form, for `SHOW FUNCTIONS` and `information_schema`:
    /// the description ends with what leaves each site; options are listed
    /// after the arguments.
    pub fn documentation(&self) -> Documentation {
        let section = DocSection {
            include: true,
            label: self.family.label(),
            description: Some(self.family.about()),
        };
        let description = format!("{} Leaves each site: {}", self.description, self.releases);
        let mut builder = Documentation::builder(section, description, self.syntax)
            .with_sql_example(self.example);
        for (name, about) in self.arguments {
            builder = builder.with_argument(*name, *about);
        }
        for option in self.options {
            builder = builder.with_argument(
                format!("option {}", option.name),
                format!("{} (default {})", option.meaning, option.default),
            );
        }
        builder.build()
    }

    /// The section of the reference page for function `name`: a heading,
    /// the description, then syntax, arguments, options, result and what
    /// leaves each site; `facts` are further lines about what leaves (the
    /// catalogue's, for an aggregate).
    pub fn markdown(&self, name: &str, facts: &[String]) -> String {
        let mut page = format!("### `{name}`\n\n{}\n\n", self.description);
        page.push_str(&format!("```sql\n{}\n```\n\n", self.syntax));
        if !self.arguments.is_empty() {
            page.push_str("| argument | meaning |\n|---|---|\n");
            for (argument, about) in self.arguments {
                page.push_str(&format!("| `{argument}` | {} |\n", cell(about)));
            }
            page.push('\n');
        }
        if !self.options.is_empty() {
            page.push_str("| option | default | meaning |\n|---|---|---|\n");
            for o in self.options {
                page.push_str(&format!(
                    "| `{}` | {} | {} |\n",
                    o.name,
                    cell(o.default),
                    cell(o.meaning)
                ));
            }
            page.push('\n');
        }
        page.push_str(&format!("**Returns:** {}\n\n", self.returns));
        page.push_str(&format!("**What leaves each site:** {}", self.releases));
        for fact in facts {
            page.push_str(&format!(" {fact}"));
        }
        page.push_str(&format!(
            "\n\n**Example:**\n\n```sql\n{}\n```\n\n",
            self.example
        ));
        page
    }

    /// The text `\h NAME` prints.
    pub fn text(&self, name: &str, facts: &[String]) -> String {
        let mut text = format!("{name}: {}\n\nSyntax: {}\n", self.description, self.syntax);
        let width = self
            .arguments
            .iter()
            .map(|(a, _)| a.len())
            .chain(self.options.iter().map(|o| o.name.len()))
            .max()
            .unwrap_or(0);
        if !self.arguments.is_empty() {
            text.push_str("\nArguments:\n");
            for (argument, about) in self.arguments {
                text.push_str(&format!("  {argument:width$}  {about}\n"));
            }
        }
        if !self.options.is_empty() {
            text.push_str("\nOptions:\n");
            for o in self.options {
                text.push_str(&format!(
                    "  {:width$}  {} (default {})\n",
                    o.name, o.meaning, o.default
                ));
            }
        }
        text.push_str(&format!("\nReturns: {}\n", self.returns));
        text.push_str(&format!("\nLeaves each site: {}", self.releases));
        for fact in facts {
            text.push_str(&format!(" {fact}"));
        }
        text.push_str(&format!("\n\nExample:\n  {}\n", self.example));
        text
    }
}

/// Text for a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: FunctionDoc = FunctionDoc {
        family: FunctionFamily::Tests,
        description: "Does a | b.",
        syntax: "f(x [, options])",
        arguments: &[("x", "a column | expression"), ("options", "key=value")],
        options: &[DocOption {
            name: "level",
            default: "0.95",
            meaning: "the level",
        }],
        returns: "one row: `a, b`",
        releases: "two counts.",
        example: "SELECT * FROM f('t')",
    };

    #[test]
    fn datafusion_documentation_says_what_leaves_and_lists_the_options() {
        let documentation = DOC.documentation();
        assert_eq!(
            documentation.description,
            "Does a | b. Leaves each site: two counts."
        );
        assert_eq!(documentation.syntax_example, "f(x [, options])");
        let arguments = documentation.arguments.unwrap();
        assert_eq!(arguments.len(), 3);
        assert_eq!(arguments[2].0, "option level");
        assert_eq!(arguments[2].1, "the level (default 0.95)");
        assert_eq!(documentation.doc_section.label, "Tests and summaries");
    }

    #[test]
    fn markdown_escapes_table_cells_and_text_aligns_names() {
        let page = DOC.markdown("f", &["A fact.".to_string()]);
        assert!(page.starts_with("### `f`\n\nDoes a | b.\n\n```sql\nf(x [, options])\n```"));
        assert!(page.contains("| `x` | a column \\| expression |"), "{page}");
        assert!(page.contains("| `level` | 0.95 | the level |"));
        assert!(page.contains("**What leaves each site:** two counts. A fact."));
        let text = DOC.text("f", &[]);
        assert!(
            text.contains("  x        a column | expression\n"),
            "{text}"
        );
        assert!(
            text.contains("  level    the level (default 0.95)\n"),
            "{text}"
        );
    }
}
