//! The Flight protocol of a worker: each Flight call and action mapped to
//! the service's checked answers, and the privacy-budget reply.

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use super::calls::WorkerService;
use crate::error::Result;
use crate::protocol::flight::{
    ACTION_ENCODE_MASKED, ACTION_EXPLAIN, ACTION_PRIVACY_BUDGET, ACTION_RELEASE_FIT,
    ACTION_SECURE_CONFIRM, ACTION_SECURE_REVEAL, ACTION_SECURE_SETUP, ACTION_SECURE_SHARE,
    ACTION_SECURE_UNMASK, ReleaseFit, TicketCommand, ticket_command,
};
use crate::protocol::site::BudgetLine;

type FlightStream<T> = BoxStream<'static, Result<T, Status>>;

#[tonic::async_trait]
impl FlightService for WorkerService {
    type HandshakeStream = FlightStream<HandshakeResponse>;
    type ListFlightsStream = FlightStream<FlightInfo>;
    type DoGetStream = FlightStream<FlightData>;
    type DoPutStream = FlightStream<PutResult>;
    type DoActionStream = FlightStream<arrow_flight::Result>;
    type ListActionsStream = FlightStream<ActionType>;
    type DoExchangeStream = FlightStream<FlightData>;

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let peer = self.authorize(&request, "GetSchema")?;
        let analyst = self.analyst(&request);
        let path = &request.get_ref().path;
        let table = match path.as_slice() {
            [name] => self.tables.get(name),
            _ => None,
        };
        // A table outside the analyst's profile is refused, by name.
        if let (Some(table), Some(profile)) = (table, self.profiles.of(analyst.name()))
            && profile
                .tables
                .as_ref()
                .is_some_and(|t| !t.contains(&table.name))
        {
            return Err(self.refuse(
                &peer,
                "GetSchema",
                Status::permission_denied(format!(
                    "refused: analyst profile `{}` (tables): table `{}` is not among the tables this analyst may query",
                    profile.name, table.name
                )),
            ));
        }
        let Some(table) = table else {
            // Only the tables the analyst's profile reaches are named.
            let profile = self.profiles.of(analyst.name());
            let reachable: Vec<String> = self
                .tables
                .keys()
                .filter(|k| {
                    profile.is_none_or(|p| p.tables.as_ref().is_none_or(|t| t.contains(*k)))
                })
                .map(|k| format!("`{k}`"))
                .collect();
            return Err(self.refuse(
                &peer,
                "GetSchema",
                Status::not_found(format!(
                    "this worker serves no table {path:?} (it serves {})",
                    if reachable.is_empty() {
                        "none you may query".to_string()
                    } else {
                        reachable.join(", ")
                    }
                )),
            ));
        };
        let schema = table.advertised_schema();
        let result = SchemaResult::try_from(SchemaAsIpc::new(&schema, &IpcWriteOptions::default()))
            .map_err(|e| Status::internal(e.to_string()))?;
        self.log(
            &peer,
            &format!(
                "table={}: schema ({} columns)",
                table.name,
                schema.fields().len()
            ),
        );
        Ok(Response::new(result))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let peer = self.authorize(&request, "DoGet")?;
        let analyst = self.analyst(&request);
        let command = TicketCommand::decode(request.get_ref().ticket.as_ref()).map_err(|e| {
            self.refuse(
                &peer,
                "DoGet",
                Status::invalid_argument(format!("malformed ticket: {e}")),
            )
        })?;
        let batch = match command.command {
            Some(ticket_command::Command::Encode(encode)) => {
                // The rows a fit keeps go when this connection closes.
                if let (Some(scope), Some(addr)) = (encode.fit_scope, request.remote_addr()) {
                    self.fits.note(addr, scope);
                }
                self.limited(&peer, "DoGet", self.run_encoder((&peer, &analyst), encode))
                    .await?
            }
            None => {
                return Err(self.refuse(
                    &peer,
                    "DoGet",
                    Status::invalid_argument("the ticket holds no command"),
                ));
            }
        };
        let stream = FlightDataEncoderBuilder::new()
            .build(futures::stream::once(async move { Ok(batch) }))
            .map_err(Status::from);
        Ok(Response::new(stream.boxed()))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let peer = self.authorize(&request, "DoAction")?;
        let analyst = self.analyst(&request);
        let action = request.into_inner();
        let body = match action.r#type.as_str() {
            ACTION_EXPLAIN => {
                self.limited(
                    &peer,
                    ACTION_EXPLAIN,
                    self.explain((&peer, &analyst), &action.body),
                )
                .await?
            }
            ACTION_RELEASE_FIT => {
                let release = ReleaseFit::decode(action.body.as_ref()).map_err(|e| {
                    self.refuse(
                        &peer,
                        ACTION_RELEASE_FIT,
                        Status::invalid_argument(format!("malformed request: {e}")),
                    )
                })?;
                // Only the session that started the fit knows its (random)
                // scope id: a release names nothing else's rows.
                let released = self.release_fit(release.scope);
                self.log(
                    &peer,
                    &if released {
                        format!("released fit {}", release.scope)
                    } else {
                        format!(
                            "release of fit {}: no rows kept under that id",
                            release.scope
                        )
                    },
                );
                Vec::new()
            }
            ACTION_SECURE_SETUP => {
                self.limited(
                    &peer,
                    ACTION_SECURE_SETUP,
                    self.secure_setup((&peer, &analyst), &action.body),
                )
                .await?
            }
            ACTION_PRIVACY_BUDGET => {
                let name = String::from_utf8_lossy(&action.body).to_string();
                let tables = self.tables_of(&analyst);
                let table = tables.get(&name).ok_or_else(|| {
                    self.refuse(
                        &peer,
                        ACTION_PRIVACY_BUDGET,
                        Status::not_found(format!("this worker serves no table `{name}`")),
                    )
                })?;
                let line = table.dp.budget_line(&name, analyst.name());
                self.log(
                    &peer,
                    &format!("table={name}: privacy budget of analyst {}", analyst.name()),
                );
                privacy_budget_body(&line).into_bytes()
            }
            ACTION_ENCODE_MASKED => {
                self.limited(
                    &peer,
                    ACTION_ENCODE_MASKED,
                    self.encode_masked((&peer, &analyst), &action.body),
                )
                .await?
            }
            ACTION_SECURE_REVEAL => {
                self.limited(
                    &peer,
                    ACTION_SECURE_REVEAL,
                    self.secure_reveal((&peer, &analyst), &action.body),
                )
                .await?
            }
            ACTION_SECURE_SHARE => {
                self.limited(
                    &peer,
                    ACTION_SECURE_SHARE,
                    self.secure_share((&peer, &analyst), &action.body),
                )
                .await?
            }
            ACTION_SECURE_CONFIRM => {
                self.limited(
                    &peer,
                    ACTION_SECURE_CONFIRM,
                    self.secure_confirm((&peer, &analyst), &action.body),
                )
                .await?
            }
            ACTION_SECURE_UNMASK => {
                self.limited(
                    &peer,
                    ACTION_SECURE_UNMASK,
                    self.secure_unmask((&peer, &analyst), &action.body),
                )
                .await?
            }
            other => {
                return Err(self.refuse(
                    &peer,
                    "DoAction",
                    Status::invalid_argument(format!(
                        "unknown action `{other}` (known: {ACTION_EXPLAIN}, {ACTION_RELEASE_FIT}, {ACTION_SECURE_SETUP}, {ACTION_SECURE_REVEAL}, {ACTION_SECURE_SHARE}, {ACTION_ENCODE_MASKED}, {ACTION_SECURE_CONFIRM}, {ACTION_SECURE_UNMASK}, {ACTION_PRIVACY_BUDGET})"
                    )),
                ));
            }
        };
        let result = arrow_flight::Result { body: body.into() };
        Ok(Response::new(
            futures::stream::once(async move { Ok(result) }).boxed(),
        ))
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        self.authorize(&request, "ListActions")?;
        let actions = [
            (
                ACTION_EXPLAIN,
                "the physical plan an encoder would run here",
            ),
            (ACTION_RELEASE_FIT, "drop the rows kept for a fit"),
            (
                ACTION_SECURE_SETUP,
                "secure aggregation step 1: a session key pair and the group keys",
            ),
            (
                ACTION_SECURE_REVEAL,
                "secure aggregation, a sparse round's coin toss: this site's graph nonce, once every commitment is fixed",
            ),
            (
                ACTION_SECURE_SHARE,
                "secure aggregation step 2: shares of the session secrets, sealed to each site",
            ),
            (
                ACTION_ENCODE_MASKED,
                "secure aggregation step 3: the state, aligned and double-masked",
            ),
            (
                ACTION_SECURE_CONFIRM,
                "secure aggregation step 4: this site's signature of the survivor list",
            ),
            (
                ACTION_SECURE_UNMASK,
                "secure aggregation step 5: the shares that unmask the survivors' sum, for a list the threshold signed",
            ),
        ]
        .map(|(name, description)| {
            Ok(ActionType {
                r#type: name.into(),
                description: description.into(),
            })
        });
        Ok(Response::new(futures::stream::iter(actions).boxed()))
    }

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented(
            "handshake: send the token with every call instead",
        ))
    }

    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("a worker lists no flights"))
    }

    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented(
            "a worker serves states through DoGet only",
        ))
    }

    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented(
            "a worker serves states through DoGet only",
        ))
    }

    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        Err(Status::unimplemented("a worker accepts no data"))
    }

    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented(
            "a worker serves states through DoGet only",
        ))
    }
}

/// The reply of [`ACTION_PRIVACY_BUDGET`]: `<budget or unlimited> <spent>`.
fn privacy_budget_body(line: &BudgetLine) -> String {
    format!(
        "{} {}",
        line.budget
            .map_or_else(|| "unlimited".to_string(), |b| b.to_string()),
        line.spent
    )
}
