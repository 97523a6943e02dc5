//! A site's half of secure aggregation (see [`crate::protocol::secure`]
//! for the protocol): its keys and secrets for a session, kept from step to
//! step ([`steps`]), and what it checks of the relayed keys ([`checks`]); and the
//! alignment of its state to the coordinator's group list ([`align`]); the
//! digest of the encoder it ran ([`encoder_digest`]).

mod align;
mod checks;
mod digest;
mod steps;

pub(crate) use checks::{check_participants, check_session};
pub use digest::encoder_digest;
pub(crate) use steps::ClientSecrets;
pub use steps::SecureSessionIds;
