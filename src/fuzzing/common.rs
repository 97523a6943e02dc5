//! What the fuzz entry points share: one runtime, a scratch folder, the
//! repository's test data, and text input as the parsers take it (in a
//! file of its own, so that the entry points' files and the module that
//! gathers them import in one direction only).

use std::sync::OnceLock;

use crate::error::{FedError, Result};

/// The one runtime every entry point blocks on (a fuzzer calls them
/// millions of times; a runtime per call would dominate).
pub(super) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// A scratch folder of this process for the files the file targets write.
pub(super) fn scratch() -> &'static std::path::Path {
    static SCRATCH: OnceLock<std::path::PathBuf> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("fedsql-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        dir
    })
}

/// The repository's `testdata/` (the seeds' and the served tables' files).
pub(super) fn testdata() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// Text input as the parsers take it: invalid UTF-8 is refused like a
/// file that is not text.
pub(super) fn text(data: &[u8]) -> Result<&str> {
    std::str::from_utf8(data)
        .map_err(|e| FedError::InvalidArgument(format!("the input is not UTF-8: {e}")))
}
