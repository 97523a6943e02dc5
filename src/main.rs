//! The `fedsql` binary: the REPL, or `-c`/`-f` scripts (see [`fedsql::cli`]).

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    match fedsql::cli::main_with_args(std::env::args_os()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error}");
            ExitCode::FAILURE
        }
    }
}
