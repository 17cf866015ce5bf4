//! `hookd queues ...`: pull queues' own settings (FIFO lanes), a tenant's objects.

use clap::Subcommand;
use hookd_proto::v1 as pb;

use super::{Api, Failure, show, show_value, table};

#[derive(Debug, Subcommand)]
pub enum QueuesCmd {
    /// The queues with settings of their own (a queue without any is unordered).
    List,
    Get {
        name: String,
    },
    /// Create or replace a queue's settings.
    Put {
        name: String,
        /// FIFO lanes per ordering key: block or park (without: unordered).
        #[arg(long)]
        fifo: Option<String>,
        #[arg(long)]
        description: Option<String>,
        /// How long its completed messages are kept (90m, 7d; without: its tenant's, else
        /// the server's).
        #[arg(long, value_parser = super::parse_age)]
        retention: Option<u64>,
    },
    /// Delete a queue's settings (its messages stay, unordered).
    Delete {
        name: String,
    },
}

pub(super) async fn queues(
    api: &mut Api,
    json: bool,
    cmd: QueuesCmd,
    server: &str,
) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    match cmd {
        QueuesCmd::List => {
            let r = api
                .list_queues(pb::ListQueuesRequest {})
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| print_queues(&r.queues))
        }
        QueuesCmd::Get { name } => {
            let r = api
                .get_queue(pb::GetQueueRequest { name })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| print_queues(r.queue.as_slice()))
        }
        QueuesCmd::Put {
            name,
            fifo,
            description,
            retention,
        } => {
            let r = api
                .put_queue(pb::PutQueueRequest {
                    queue: Some(pb::Queue {
                        name,
                        fifo: fifo.unwrap_or_default(),
                        description: description.unwrap_or_default(),
                        retention_secs: retention.map_or(0, |ms| ms / 1_000),
                        ..Default::default()
                    }),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                super::outln!("{}", if r.created { "created" } else { "replaced" });
                print_queues(r.queue.as_slice());
            })
        }
        QueuesCmd::Delete { name } => {
            api.delete_queue(pb::DeleteQueueRequest { name: name.clone() })
                .await
                .map_err(fail)?;
            show_value(json, &serde_json::json!({ "deleted": name }), || {
                super::outln!("deleted the settings of queue {name}");
            })
        }
    }
}

fn print_queues(queues: &[pb::Queue]) {
    let rows = queues
        .iter()
        .map(|q| {
            vec![
                q.name.clone(),
                if q.fifo.is_empty() {
                    "-".into()
                } else {
                    q.fifo.clone()
                },
                q.description.clone(),
                if q.from_config { "config" } else { "api" }.into(),
            ]
        })
        .collect();
    table(&["NAME", "FIFO", "DESCRIPTION", "DEFINED IN"], rows);
}
