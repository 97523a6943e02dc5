//! The engine a set of sites share: one DataFusion session (one runtime,
//! one memory pool, one cache of file listings and Parquet footers) and
//! the physical plans of the encoders they have run.
//!
//! Whoever makes sites owns their engine and hands it to each
//! ([`crate::site::local::LocalClient::from_files`]): a coordinator one
//! per context, a worker one per running worker. A test or an embedder
//! makes its own with [`SiteEngine::new`]; there is no process-wide one.
//!
//! A thousand in-process clients must cost little more than eight, so the
//! work of a round at a site must not grow with the plan. A site plans an
//! encoder physically once, as a *template* for its layout (format, CSV
//! options, schema, policy); every site of that layout, in this round and
//! the next, instantiates the template for its own data: its file, stated
//! afresh each round (size and modification time, so a file that changed is
//! read anew and its cached footer dropped), bound into the template's scan.
//! The template is the site's own plan of the validated encoder the
//! coordinator sent; nothing of it crosses the wire.
//!
//! The fast path — templates, a small Parquet file read by the site
//! ([`small_parquet::SmallParquetExec`]) with its footer and bytes
//! cached ([`small_parquet::FooterCache`]), the rows of a fit kept between its rounds
//! ([`crate::site::engine::kept_rows`]) and read by row group — can be switched off
//! per table (`OPTIONS ('fast_path' 'off')`) or per worker (`--fast-path
//! off`, TOML `fast_path = "off"`): each encoder is then planned from its
//! logical plan over DataFusion's own `ListingTable` scan and run as
//! DataFusion runs it, every round. The answers are the same either way
//! (the consistency suite runs in both modes); only the time differs.
//! What a site checks and releases does not depend on the switch.
//!
//! Memory: every site draws on the one shared pool; a request under a
//! memory limit draws on a child pool of its own, which refuses past its
//! limit whatever the shared pool has left.
pub(crate) mod in_order;
pub(crate) mod kept_rows;
pub(crate) mod session;
pub(crate) mod site_file;
pub(crate) mod small_parquet;
pub(crate) mod templates;
pub(crate) mod yielding;

pub use session::{FAST_PATH_KEY, SiteEngine, fast_path_option, parse_fast_path, site_session};
pub use site_file::{SiteFile, bound_scan};
pub use templates::{Template, TemplateKey, reads_one_table};
