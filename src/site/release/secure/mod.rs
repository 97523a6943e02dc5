//! A site's half of secure aggregation (see [`crate::protocol::secure`]
//! for the protocol): its keys and secrets for a session, kept from step to
//! step, and what it checks before each answer ([`steps`]); and the
//! alignment of its state to the coordinator's group list ([`align`]); the
//! digest of the encoder it ran ([`encoder_digest`]).

mod align;
mod digest;
mod steps;

pub use digest::encoder_digest;
pub use steps::SecureSessionIds;
pub(crate) use steps::{ClientSecrets, check_participants};
