//! Subscriptions: which endpoints and queues get the events published to a topic; made,
//! replaced and deleted here through PutSubscription and DeleteSubscription.

use super::*;

/// The form's fields, as typed (the server checks them and names the field at fault).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SubscriptionForm {
    #[serde(default)]
    name: String,
    /// `endpoint:NAME` or `queue:NAME`.
    #[serde(default)]
    to: String,
    /// Space- or comma-separated patterns.
    #[serde(default)]
    event_types: String,
    /// JSON (Outpost's syntax); empty: none.
    #[serde(default)]
    filter: String,
    #[serde(default)]
    description: String,
}

impl SubscriptionForm {
    fn subscription(&self) -> Result<pb::Subscription, Failure> {
        use pb::subscription::Destination as D;
        let to = self.to.trim();
        let destination = if let Some(n) = to.strip_prefix("endpoint:") {
            D::Endpoint(n.to_owned())
        } else if let Some(n) = to.strip_prefix("queue:") {
            D::Queue(n.to_owned())
        } else {
            return Err(Failure::bad(format!(
                "to: {to:?} is not endpoint:NAME or queue:NAME"
            )));
        };
        let filter = match self.filter.trim() {
            "" => None,
            text => {
                let value: serde_json::Value = serde_json::from_str(text)
                    .map_err(|e| Failure::bad(format!("filter: not JSON: {e}")))?;
                Some(
                    hookd_proto::json::json_to_struct(&value)
                        .ok_or_else(|| Failure::bad("filter: must be a JSON object"))?,
                )
            }
        };
        Ok(pb::Subscription {
            name: self.name.trim().to_owned(),
            destination: Some(destination),
            event_types: self
                .event_types
                .split([' ', ','])
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
            filter,
            description: self.description.trim().to_owned(),
            ..Default::default()
        })
    }
}

fn subscription_form(s: &Session, f: &SubscriptionForm) -> Markup {
    let field = |label: &str, name: &str, value: &str, hint: &str| {
        html! {
            label { span { (label) } input type="text" name=(name) value=(value); small { (hint) } }
        }
    };
    if !s.may_change() {
        return html! {};
    }
    html! {
        form.edit method="post" action="/ui/subscriptions" {
            (csrf(s))
            (field("name", "name", &f.name, "letters, digits, - _ . (the same name replaces)"))
            (field("to", "to", &f.to, "endpoint:NAME or queue:NAME"))
            (field("event types", "event_types", &f.event_types, "exact, prefix.* (* spans dots) or *; space-separated"))
            label { span { "filter" } textarea name="filter" rows="4" { (f.filter) }
                small { "optional JSON, as Hookdeck Outpost takes it: {\"data\": {\"priority\": {\"$in\": [\"high\"]}}}" } }
            (field("description", "description", &f.description, ""))
            button type="submit" { "Save" }
        }
    }
}

fn subscriptions_page(
    s: &Session,
    notice: &str,
    form: &SubscriptionForm,
    c: &Console,
    q: &str,
) -> Markup {
    let every = c.api.subscriptions().list(s.tenant());
    // The search box: a name, destination or event type containing the text.
    let subscriptions: Vec<_> = every
        .iter()
        .filter(|sub| {
            q.is_empty()
                || sub.spec.name.contains(q)
                || sub.destination.local_key().contains(q)
                || sub.spec.event_types.iter().any(|t| t.contains(q))
        })
        .collect();
    page(
        "Subscriptions",
        Nav::Subscriptions,
        Some(s),
        notice,
        html! {
            p.hint { "An event published to a topic (" code { "Enqueue" } " with " code { "topic" } ") gets one delivery per endpoint or queue a subscription here takes it for, each with its own retries and dead letters, all sharing the event's id (" code { "hookd-event-id" } ")." }
            form.filters method="get" action="/ui/subscriptions" role="search" {
                label { "Name, destination or event type contains " input type="search" name="q" value=(q); }
                button type="submit" { "Filter" }
                @if !q.is_empty() { " " a href="/ui/subscriptions" { "clear" } }
            }
            @if subscriptions.is_empty() { p { @if every.is_empty() { "No subscription is defined." } @else { "None of the " (every.len()) " subscriptions matches." } } } @else {
                table.list {
                    thead { tr { th { "name" } th { "to" } th { "event types" } th { "filter" } th { "description" } th { "updated" } th {} } }
                    tbody {
                        @for sub in &subscriptions {
                            @let spec = &sub.spec;
                            tr {
                                td { (spec.name) }
                                td { @match sub.destination.endpoint_name() {
                                    Some(e) => { a href=(format!("/ui/endpoints/{}", segment(e))) { "endpoint:" (e) } }
                                    None => { (sub.destination.local_key()) }
                                } }
                                td { @for (i, t) in spec.event_types.iter().enumerate() { @if i > 0 { " " } code { (t) } } }
                                td { @match &spec.filter {
                                    Some(f) => { code { (f.to_string()) } }
                                    None => { "none" }
                                } }
                                td { (spec.description) }
                                td { (view::time(spec.updated_ms)) }
                                td { (button(s, &format!("/ui/subscriptions/{}/delete", segment(&spec.name)), "Delete", &[])) }
                            }
                        }
                    }
                }
            }
            h2 { "New or replaced subscription" }
            (subscription_form(s, form))
        },
    )
}

pub(crate) async fn subscriptions(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(n): Query<super::endpoints::ListQuery>,
) -> Page {
    spans_destinations(&s)?;
    html_page(subscriptions_page(
        &s,
        &n.notice,
        &SubscriptionForm::default(),
        &c,
        &n.q,
    ))
}

pub(crate) async fn save_subscription(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Form(f): Form<SubscriptionForm>,
) -> Page {
    let saved = match f.subscription() {
        Ok(subscription) => c
            .api
            .put_subscription(call(
                &s,
                pb::PutSubscriptionRequest {
                    subscription: Some(subscription),
                },
            ))
            .await
            .map_err(Failure::from),
        Err(failure) => Err(failure),
    };
    match saved {
        Ok(r) => {
            let r = r.into_inner();
            let name = r.subscription.map(|s| s.name).unwrap_or_default();
            let done = if r.created { "Created" } else { "Replaced" };
            Ok(see_other(&with_notice(
                "/ui/subscriptions",
                &format!("{done} {name}."),
            )))
        }
        Err(failure) => {
            let body = html! {
                p.error role="alert" { (failure.message) }
                (subscription_form(&s, &f))
            };
            Ok((
                failure.status,
                Html(page("Subscriptions", Nav::Subscriptions, Some(&s), "", body).into_string()),
            )
                .into_response())
        }
    }
}

pub(crate) async fn delete_subscription(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> Page {
    c.api
        .delete_subscription(call(
            &s,
            pb::DeleteSubscriptionRequest { name: name.clone() },
        ))
        .await?;
    Ok(see_other(&with_notice(
        "/ui/subscriptions",
        &format!("Deleted {name}."),
    )))
}
