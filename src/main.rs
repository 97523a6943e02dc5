//! The `fedsql` binary: the REPL, or `-c`/`-f` scripts (see [`fedsql::frontend::cli`]).

use std::process::ExitCode;

/// mimalloc, as datafusion-cli uses: many small states and Arrow buffers
/// allocated and freed across threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    fedsql::frontend::cli::main_with_args(std::env::args_os())
        .await
        .into()
}
