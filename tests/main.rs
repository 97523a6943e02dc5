//! The one integration test binary (every extra tests/*.rs would link
//! DataFusion again). Each module is one suite.

mod support;

mod consistency;
mod dataframe;
mod explain;
mod glm;
mod lm;
mod refusal;
mod repl;
mod tables;
