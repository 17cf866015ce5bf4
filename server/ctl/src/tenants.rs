//! `hookd tenants ...` and `hookd tokens ...`: a hookd's tenants (an operator's token), and
//! a tenant's API tokens (`--tenant` names it for an operator).

use clap::Subcommand;
use hookd_proto::v1 as pb;

use super::{Api, Failure, show, show_value, table};

#[derive(Debug, Subcommand)]
pub enum TenantsCmd {
    /// Every tenant, in name order.
    List,
    Get {
        name: String,
    },
    /// Make a tenant (its name is what calls and `--tenant` name it by).
    Create {
        name: String,
        #[arg(long)]
        display_name: Option<String>,
        /// A label, `KEY=VALUE`; repeatable.
        #[arg(long = "metadata", value_parser = super::parse_header)]
        metadata: Vec<(String, String)>,
        /// A limit, `QUOTA=N` (max_live_messages, max_live_bytes, max_events_per_day,
        /// max_events_per_second, max_endpoints, max_subscriptions, max_sources);
        /// repeatable.
        #[arg(long = "quota", value_parser = parse_quota)]
        quota: Vec<(String, u64)>,
        /// Its share of delivery against other tenants' (1 to 1000; default 1).
        #[arg(long)]
        weight: Option<u32>,
        /// How long its completed messages are kept (90m, 7d; without: the server's).
        #[arg(long, value_parser = super::parse_age)]
        retention: Option<u64>,
        #[command(flatten)]
        portal: PortalArgs,
    },
    /// Replace a tenant's display name and labels, and with --quota its quota (the limits
    /// not named: none); without --quota its quota stays.
    Update {
        name: String,
        #[arg(long)]
        display_name: Option<String>,
        #[arg(long = "metadata", value_parser = super::parse_header)]
        metadata: Vec<(String, String)>,
        #[arg(long = "quota", value_parser = parse_quota)]
        quota: Vec<(String, u64)>,
        /// Its share of delivery (1 to 1000); without it the weight stays.
        #[arg(long)]
        weight: Option<u32>,
        /// How long its completed messages are kept (90m, 7d); without it the setting stays.
        #[arg(long, value_parser = super::parse_age)]
        retention: Option<u64>,
        /// Any of these replaces the tenant's portal settings (those not named: none);
        /// without them they stay.
        #[command(flatten)]
        portal: PortalArgs,
    },
    /// Delete a tenant with its objects; refused while it has live messages, unless
    /// --force (they go too).
    Delete {
        name: String,
        #[arg(long)]
        force: bool,
    },
}

/// A tenant's portal settings.
#[derive(Debug, clap::Args)]
pub struct PortalArgs {
    /// An origin whose pages may show the tenant's portal in an iframe
    /// (`https://app.example.com`); repeatable.
    #[arg(long = "portal-frame-ancestor")]
    frame_ancestors: Vec<String>,
    /// The portal's heading (default: the display name).
    #[arg(long)]
    portal_title: Option<String>,
    /// An https image beside the heading.
    #[arg(long)]
    portal_logo_url: Option<String>,
    /// Links and buttons in this colour (`#rrggbb`).
    #[arg(long)]
    portal_accent_color: Option<String>,
}

impl PortalArgs {
    fn settings(self) -> Option<pb::TenantPortal> {
        let named = !self.frame_ancestors.is_empty()
            || self.portal_title.is_some()
            || self.portal_logo_url.is_some()
            || self.portal_accent_color.is_some();
        named.then(|| pb::TenantPortal {
            frame_ancestors: self.frame_ancestors,
            title: self.portal_title.unwrap_or_default(),
            logo_url: self.portal_logo_url.unwrap_or_default(),
            accent_color: self.portal_accent_color.unwrap_or_default(),
        })
    }
}

/// `hookd portal ...`: links to a tenant's portal.
#[derive(Debug, Subcommand)]
pub enum PortalCmd {
    /// Print a signed link that opens the tenant's portal (its view of the console).
    Link {
        /// The tenant (else --tenant's, or a tenant token's own).
        #[arg(long = "for")]
        tenant: Option<String>,
        /// read (look only) or admin (also change); repeatable. Default: read.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// How long it works, in seconds (at most 86400).
        #[arg(long, default_value_t = 3_600)]
        expires_in_secs: u32,
        /// Only this endpoint (`endpoint:NAME`); repeatable.
        #[arg(long = "destination")]
        destinations: Vec<String>,
        /// Where an expired link sends the browser for a new one.
        #[arg(long)]
        refresh_url: Option<String>,
        /// Who the link is for (shown in the portal and logged).
        #[arg(long)]
        subject: Option<String>,
    },
    /// Refuse one link (--link ID), or every link of the tenant made until now.
    Revoke {
        #[arg(long = "for")]
        tenant: Option<String>,
        #[arg(long = "link")]
        link_id: Option<String>,
    },
}

pub(super) async fn portal(
    api: &mut Api,
    json: bool,
    cmd: PortalCmd,
    server: &str,
) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    match cmd {
        PortalCmd::Link {
            tenant,
            scopes,
            expires_in_secs,
            destinations,
            refresh_url,
            subject,
        } => {
            let revoke = match &tenant {
                Some(t) => format!("hookd portal revoke --for {t}"),
                None => "hookd portal revoke".to_owned(),
            };
            let r = api
                .create_portal_link(pb::CreatePortalLinkRequest {
                    tenant: tenant.unwrap_or_default(),
                    scopes,
                    expires_in_secs,
                    destinations,
                    refresh_url: refresh_url.unwrap_or_default(),
                    subject: subject.unwrap_or_default(),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                super::outln!("{}", r.url);
                super::outln!(
                    "(link {}; it is a credential until it expires: `{revoke} --link {}` refuses it)",
                    r.link_id,
                    r.link_id
                );
            })
        }
        PortalCmd::Revoke { tenant, link_id } => {
            let link_id = link_id.unwrap_or_default();
            api.revoke_portal_links(pb::RevokePortalLinksRequest {
                tenant: tenant.unwrap_or_default(),
                link_id: link_id.clone(),
            })
            .await
            .map_err(fail)?;
            show_value(json, &serde_json::json!({ "revoked": link_id }), || {
                if link_id.is_empty() {
                    super::outln!("revoked every portal link made until now");
                } else {
                    super::outln!("revoked portal link {link_id}");
                }
            })
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TokensCmd {
    /// The tenant's tokens (never the tokens themselves).
    List,
    /// Make a token; it is printed once, here.
    Create {
        name: String,
        /// enqueue, consume, read or admin; repeatable.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// Only this destination (`endpoint:NAME`, `queue:NAME`); repeatable.
        #[arg(long = "destination")]
        destinations: Vec<String>,
    },
    /// Revoke a token: the next call with it is refused.
    Revoke { name: String },
}

pub(super) async fn tenants(
    api: &mut Api,
    json: bool,
    cmd: TenantsCmd,
    server: &str,
) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    let tenant = |name: String,
                  display_name: Option<String>,
                  metadata: Vec<(String, String)>,
                  quota: Vec<(String, u64)>,
                  weight: Option<u32>,
                  portal: PortalArgs| {
        Some(pb::Tenant {
            portal: portal.settings(),
            weight: weight.unwrap_or(0),
            name,
            display_name: display_name.unwrap_or_default(),
            metadata: metadata.into_iter().collect(),
            quota: (!quota.is_empty()).then(|| quota_of(&quota)),
            ..Default::default()
        })
    };
    match cmd {
        TenantsCmd::List => {
            let mut all = Vec::new();
            let mut page_token = String::new();
            loop {
                let r = api
                    .list_tenants(pb::ListTenantsRequest {
                        page_size: 1_000,
                        page_token,
                    })
                    .await
                    .map_err(fail)?
                    .into_inner();
                all.extend(r.tenants);
                if r.next_page_token.is_empty() {
                    break;
                }
                page_token = r.next_page_token;
            }
            let r = pb::ListTenantsResponse {
                tenants: all,
                next_page_token: String::new(),
            };
            show(json, &r, |r| print_tenants(&r.tenants))
        }
        TenantsCmd::Get { name } => {
            let r = api
                .get_tenant(pb::GetTenantRequest { name })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| print_tenants(r.tenant.as_slice()))
        }
        TenantsCmd::Create {
            name,
            display_name,
            metadata,
            quota,
            weight,
            retention,
            portal,
        } => {
            let r = api
                .create_tenant(pb::CreateTenantRequest {
                    tenant: tenant(name, display_name, metadata, quota, weight, portal).map(
                        |mut t| {
                            t.retention_secs = retention.map_or(0, |ms| ms / 1_000);
                            t
                        },
                    ),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                super::outln!("created tenant");
                print_tenants(r.tenant.as_slice());
            })
        }
        TenantsCmd::Update {
            name,
            display_name,
            metadata,
            quota,
            weight,
            retention,
            portal,
        } => {
            let r = api
                .update_tenant(pb::UpdateTenantRequest {
                    tenant: tenant(name, display_name, metadata, quota, weight, portal).map(
                        |mut t| {
                            t.retention_secs = retention.map_or(0, |ms| ms / 1_000);
                            t
                        },
                    ),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| print_tenants(r.tenant.as_slice()))
        }
        TenantsCmd::Delete { name, force } => {
            let r = api
                .delete_tenant(pb::DeleteTenantRequest {
                    name: name.clone(),
                    force,
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                super::outln!(
                    "deleted tenant {name}: {} messages and {} objects removed",
                    r.removed_messages,
                    r.removed_objects
                );
            })
        }
    }
}

pub(super) async fn tokens(
    api: &mut Api,
    json: bool,
    cmd: TokensCmd,
    server: &str,
) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    match cmd {
        TokensCmd::List => {
            let r = api
                .list_tokens(pb::ListTokensRequest {})
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| print_tokens(&r.tokens))
        }
        TokensCmd::Create {
            name,
            scopes,
            destinations,
        } => {
            let r = api
                .create_token(pb::CreateTokenRequest {
                    token: Some(pb::Token {
                        name,
                        scopes,
                        destinations,
                        ..Default::default()
                    }),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                super::outln!("{}", r.secret);
                super::outln!("(the token is shown this once; hookd keeps only its hash)");
            })
        }
        TokensCmd::Revoke { name } => {
            api.revoke_token(pb::RevokeTokenRequest { name: name.clone() })
                .await
                .map_err(fail)?;
            show_value(json, &serde_json::json!({ "revoked": name }), || {
                super::outln!("revoked token {name}");
            })
        }
    }
}

/// Where a quota's limit is in a [`pb::TenantQuota`].
type Field = fn(&mut pb::TenantQuota) -> &mut u64;

/// The quotas `--quota` can name, with where each goes.
const QUOTAS: [(&str, Field); 7] = [
    ("max_live_messages", |q| &mut q.max_live_messages),
    ("max_live_bytes", |q| &mut q.max_live_bytes),
    ("max_events_per_day", |q| &mut q.max_events_per_day),
    ("max_events_per_second", |q| &mut q.max_events_per_second),
    ("max_endpoints", |q| &mut q.max_endpoints),
    ("max_subscriptions", |q| &mut q.max_subscriptions),
    ("max_sources", |q| &mut q.max_sources),
];

/// `QUOTA=N`, with QUOTA one of [`QUOTAS`].
fn parse_quota(s: &str) -> Result<(String, u64), String> {
    let (name, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not QUOTA=N"))?;
    if !QUOTAS.iter().any(|(q, _)| *q == name) {
        let known: Vec<&str> = QUOTAS.iter().map(|(q, _)| *q).collect();
        return Err(format!("no quota {name:?} (one of {})", known.join(", ")));
    }
    let n = n
        .parse()
        .map_err(|_| format!("{n:?} is not a whole number (0: no limit)"))?;
    Ok((name.to_owned(), n))
}

fn quota_of(named: &[(String, u64)]) -> pb::TenantQuota {
    let mut quota = pb::TenantQuota::default();
    for (name, n) in named {
        if let Some((_, field)) = QUOTAS.iter().find(|(q, _)| q == name) {
            *field(&mut quota) = *n;
        }
    }
    quota
}

/// A quota as `max_live_messages=1000 ...` (its limits only).
fn quota_text(quota: Option<&pb::TenantQuota>) -> String {
    let Some(quota) = quota else {
        return String::new();
    };
    let mut quota = *quota;
    QUOTAS
        .iter()
        .filter_map(|(name, field)| {
            let n = *field(&mut quota);
            (n > 0).then(|| format!("{name}={n}"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn print_tenants(tenants: &[pb::Tenant]) {
    let rows = tenants
        .iter()
        .map(|t| {
            let metadata: Vec<String> =
                t.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
            vec![
                t.name.clone(),
                t.display_name.clone(),
                t.weight.max(1).to_string(),
                metadata.join(" "),
                quota_text(t.quota.as_ref()),
            ]
        })
        .collect();
    table(
        &["NAME", "DISPLAY NAME", "WEIGHT", "METADATA", "QUOTA"],
        rows,
    );
}

fn print_tokens(tokens: &[pb::Token]) {
    let rows = tokens
        .iter()
        .map(|t| {
            let destinations = match t.destinations.is_empty() {
                true => "(all)".to_owned(),
                false => t.destinations.join(" "),
            };
            vec![
                t.name.clone(),
                t.scopes.join(" "),
                destinations,
                t.created_by.clone(),
            ]
        })
        .collect();
    table(&["NAME", "SCOPES", "DESTINATIONS", "CREATED BY"], rows);
}
