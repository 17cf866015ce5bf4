//! A subscription's definition (issue #29): the domain value the API and the console
//! speak, the engine stores (as JSON, a catalog object of kind `Subscription`) and the
//! publish routing compiles (`hookd::subscriptions`).

use serde::{Deserialize, Serialize};

/// A subscription as stored and as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionSpec {
    pub name: String,
    /// `Destination::key()`: `endpoint:NAME` or `queue:NAME`.
    pub destination: String,
    pub event_types: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<serde_json::Value>,
    #[serde(default)]
    pub description: String,
    pub created_ms: u64,
    pub updated_ms: u64,
}
