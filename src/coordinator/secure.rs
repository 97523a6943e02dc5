//! The coordinator's half of secure aggregation: it relays the sites'
//! public keys and the union of their group keys, and sums the masked
//! states (see [`crate::protocol::secure`] for the protocol).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{join_all, try_join_all};

use crate::error::{FedError, Result};
use crate::protocol::encoder::{Encoder, StateBatch};
use crate::protocol::secure::{MaskRequest, SecureSession, union_groups};
use crate::protocol::site::{Analyst, Site, SiteRequest};

/// Runs a secure round's two exchanges with every client; returns each
/// client's masked state and the time it took. `encoders` holds each
/// client's encoder, in the order of `clients`; every request runs for
/// `analyst`.
pub(crate) async fn collect_masked_states(
    clients: &[Arc<dyn Site>],
    encoders: &[Encoder],
    analyst: &Analyst,
) -> Result<Vec<(StateBatch, Duration)>> {
    let session = SecureSession::fresh(clients.iter().map(|c| c.name().to_string()).collect());
    let start = Instant::now();
    let setups = try_join_all(clients.iter().zip(encoders).map(|(c, encoder)| async {
        c.secure_setup(&SiteRequest::new(encoder, analyst), &session)
            .await
    }))
    .await?;
    let setup_time = start.elapsed();
    let groups = union_groups(
        &setups
            .iter()
            .map(|s| s.group_keys.clone())
            .collect::<Vec<_>>(),
    )?;
    let request = MaskRequest {
        session,
        public_keys: setups.iter().map(|s| s.public_key).collect(),
        signed: setups.iter().map(|s| s.signed).collect(),
        groups,
    };
    let answers = join_all(clients.iter().zip(encoders).map(|(c, encoder)| async {
        let start = Instant::now();
        let state = c
            .encode_masked(&SiteRequest::new(encoder, analyst), &request)
            .await;
        (state, start.elapsed())
    }))
    .await;
    let mut states = Vec::with_capacity(clients.len());
    for (client, (state, time)) in clients.iter().zip(answers) {
        match state {
            Ok(state) => states.push((state, setup_time + time)),
            Err(e) => {
                return Err(FedError::InvalidArgument(format!(
                    "secure aggregation failed: client '{}' ({}) dropped out after the public keys were exchanged: {e}\n\
                     hint: the other clients' masked states cannot be unmasked without it (dropout recovery is not supported); rerun the query when every client is available",
                    client.name(),
                    client.location()
                )));
            }
        }
    }
    Ok(states)
}
