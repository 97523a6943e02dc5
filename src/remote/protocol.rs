//! The wire protocol between a coordinator and a `fedsql worker`, on top of
//! Arrow Flight.
//!
//! | call | request | answer |
//! |---|---|---|
//! | `GetSchema` | descriptor path `[table]` | the served table's Arrow schema, with [`HAS_ROWS_KEY`] / [`POSITIONAL_KEY`] metadata |
//! | `DoGet` | ticket: a [`TicketCommand`] | the state batch (Arrow IPC), one row per group |
//! | `DoAction` [`ACTION_EXPLAIN`] | body: an [`EncodeRequest`] | the worker's physical plan, as text |
//! | `DoAction` [`ACTION_RELEASE_FIT`] | body: a [`ReleaseFit`] | nothing |
//! | `ListActions` | | the action types above |
//!
//! Every call carries `authorization: Bearer <token>` in its gRPC metadata.
//! The ticket is a protobuf message with a `oneof`, and actions are named,
//! so later calls (a key exchange, masked encoding) are new variants and new
//! action names without changing the existing ones.

/// gRPC metadata key of the worker's token.
pub const AUTHORIZATION: &str = "authorization";

/// The token's prefix in [`AUTHORIZATION`].
pub const BEARER: &str = "Bearer ";

/// DoAction: the physical plan the worker would run for an encoder.
pub const ACTION_EXPLAIN: &str = "fedsql.explain";

/// DoAction: the coordinator's fit has ended; drop what was kept for it.
pub const ACTION_RELEASE_FIT: &str = "fedsql.release_fit";

/// Schema metadata: `"true"` when the served table has data rows (so its
/// column types are evidence when schemas are unified), `"false"` otherwise.
pub const HAS_ROWS_KEY: &str = "fedsql.has_rows";

/// Schema metadata: `"true"` when the served table is CSV (columns are read
/// by position, so their order must agree with the other clients).
pub const POSITIONAL_KEY: &str = "fedsql.positional";

/// Largest message (plan, shared tables, state) either side accepts.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// Runs one encoder: the plan (datafusion-proto bytes, federated scans named
/// by table) and the fit it belongs to, if any.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EncodeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub plan: Vec<u8>,
    /// The coordinator's fit scope: rounds of one fit may reuse the rows the
    /// worker decoded in the first round.
    #[prost(uint64, optional, tag = "2")]
    pub fit_scope: Option<u64>,
}

/// The body of [`ACTION_RELEASE_FIT`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReleaseFit {
    #[prost(uint64, tag = "1")]
    pub scope: u64,
}

/// What a `DoGet` ticket asks for.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TicketCommand {
    #[prost(oneof = "ticket_command::Command", tags = "1")]
    pub command: Option<ticket_command::Command>,
}

/// The commands a ticket can carry.
pub mod ticket_command {
    /// One command.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Command {
        /// Run an encoder and return its state batch.
        #[prost(message, tag = "1")]
        Encode(super::EncodeRequest),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn ticket_round_trips_and_garbage_is_an_error() {
        let ticket = TicketCommand {
            command: Some(ticket_command::Command::Encode(EncodeRequest {
                plan: vec![1, 2, 3],
                fit_scope: Some(7),
            })),
        };
        let bytes = ticket.encode_to_vec();
        assert_eq!(TicketCommand::decode(bytes.as_slice()).unwrap(), ticket);
        assert!(TicketCommand::decode(&[0xff, 0xff, 0xff][..]).is_err());
    }
}
