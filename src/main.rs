//! The `fedsql` binary: the REPL, or `-c`/`-f` scripts (see [`fedsql::frontend::cli`]).

use std::process::ExitCode;

/// mimalloc, as datafusion-cli uses: many small states and Arrow buffers
/// allocated and freed across threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match fedsql::frontend::cli::main_with_args(std::env::args_os()).await {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of the output went away (`| head -1`): nothing to say.
        Err(error) if error.is_broken_pipe() => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error}");
            ExitCode::FAILURE
        }
    }
}
