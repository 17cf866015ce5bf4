//! A SaaS's web app that shows each customer hookd's portal in an iframe: the server mints
//! a short-lived link for the customer who is logged in, the page frames it, and when the
//! link expires the portal sends the browser to /portal/refresh, which mints a new one.
//!
//! HOOKD_ADDR=http://127.0.0.1:7700 HOOKD_TOKEN=<an operator's admin token> \
//!   cargo run --example saas_portal -- 127.0.0.1:3000
//! then open http://127.0.0.1:3000/settings/webhooks (logged in as customer `acme`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use hookd_client::{Client, Options, pb};

struct App {
    hookd: Client,
    /// Where this app is reached: the origin allowed to frame the portal.
    origin: String,
}

impl App {
    /// The customer this request is from. A real app reads its own session here.
    fn logged_in_customer(&self) -> &'static str {
        "acme"
    }

    /// A link to `customer`'s portal, for 15 minutes, allowed to change things.
    async fn portal_link(&self, customer: &str) -> Result<String, tonic::Status> {
        let mut hookd = self.hookd.clone();
        let link = hookd
            .raw()
            .create_portal_link(pb::CreatePortalLinkRequest {
                tenant: customer.into(),
                scopes: vec!["admin".into()],
                expires_in_secs: 15 * 60,
                refresh_url: format!("{}/portal/refresh", self.origin),
                subject: format!("{customer}-admin"),
                ..Default::default()
            })
            .await?;
        Ok(link.into_inner().url)
    }
}

async fn webhooks_page(State(app): State<Arc<App>>) -> Response {
    match app.portal_link(app.logged_in_customer()).await {
        Ok(url) => Html(format!(
            "<!DOCTYPE html><html><head><title>Settings: webhooks</title></head><body>\
             <h1>Webhooks</h1>\
             <iframe src=\"{}\" title=\"Webhooks\" width=\"100%\" height=\"800\" style=\"border:0\"></iframe>\
             </body></html>",
            url.replace('&', "&amp;").replace('"', "&quot;")
        ))
        .into_response(),
        Err(status) => (StatusCode::BAD_GATEWAY, status.message().to_owned()).into_response(),
    }
}

/// Where an expired portal sends the browser: log the customer in again, hand it a new link.
async fn refresh(State(app): State<Arc<App>>) -> Response {
    match app.portal_link(app.logged_in_customer()).await {
        Ok(url) => (StatusCode::SEE_OTHER, [(header::LOCATION, url)]).into_response(),
        Err(status) => (StatusCode::BAD_GATEWAY, status.message().to_owned()).into_response(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let mut hookd = Client::connect_with(
        std::env::var("HOOKD_ADDR").unwrap_or_else(|_| "http://127.0.0.1:7700".into()),
        Options {
            token: std::env::var("HOOKD_TOKEN").ok(),
            ..Options::default()
        },
    )
    .await?;
    // Once per customer, when it signs up: its tenant, framed by this app only.
    let tenant = pb::Tenant {
        name: "acme".into(),
        display_name: "Acme Inc.".into(),
        portal: Some(pb::TenantPortal {
            frame_ancestors: vec![origin.clone()],
            title: "Acme Inc. webhooks".into(),
            accent_color: "#0a7c4f".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let made = hookd
        .raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(tenant.clone()),
        })
        .await;
    if made.is_err() {
        hookd
            .raw()
            .update_tenant(pb::UpdateTenantRequest {
                tenant: Some(tenant),
            })
            .await?;
    }
    let app = Arc::new(App { hookd, origin });
    let routes = axum::Router::new()
        .route("/settings/webhooks", axum::routing::get(webhooks_page))
        .route("/portal/refresh", axum::routing::get(refresh))
        .with_state(app.clone());
    println!("open {}/settings/webhooks", app.origin);
    axum::serve(listener, routes).await?;
    Ok(())
}
