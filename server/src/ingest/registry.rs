//! The sources hookd receives for: those of the config file (read-only) and those made
//! over gRPC (stored in the `sources` table through the engine, so a PutSource is durable
//! before it is answered, and replayed from the log after a crash like any write).
//!
//! The receiving handler reads the map on every request (a read lock, an `Arc` clone);
//! writers are serialised by a mutex held across the engine's commit, so the map never
//! shows a source the disk does not hold, nor misses one it does.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::source::{Limits, Source};
use hookd_core::scope::{Kind, ObjectRef, TenantId};
use hookd_core::secrets::Sealer;
use hookd_core::source::SourceSpec;
use hookd_engine::{EngineHandle, Refusal};

/// Why a source cannot be put or deleted.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{0}")]
    Invalid(String),
    #[error("source {0:?} is defined in the config file; change it there")]
    FromConfig(String),
    #[error("no source named {0:?}")]
    NotFound(String),
    #[error(transparent)]
    Refused(#[from] Refusal),
}

/// A source's key: its tenant and its name (names are unique within a tenant).
type Key = (TenantId, String);

#[derive(Debug)]
pub struct Sources {
    map: RwLock<HashMap<Key, Arc<Source>>>,
    write: tokio::sync::Mutex<()>,
    engine: EngineHandle,
    sealer: Option<Arc<Sealer>>,
    limits: Limits,
}

/// Source `name`'s object in the catalog.
fn object(tenant: TenantId, name: &str) -> ObjectRef {
    ObjectRef::new(tenant, Kind::Source, name)
}

/// A live tenant's name (for a source's path).
fn tenant_name(engine: &EngineHandle, tenant: TenantId) -> String {
    engine
        .tenants()
        .get(tenant)
        .map(|t| t.record.name.clone())
        .unwrap_or_default()
}

/// The associated data of a source's sealed secrets (names cannot hold `:` or `/`):
/// `default`'s as before tenants, another tenant's with its number, so a sealed secret
/// copied to another tenant's source does not open.
fn aad(tenant: TenantId, name: &str) -> String {
    if tenant.is_default() {
        format!("source:{name}")
    } else {
        format!("source:{}/{name}", tenant.0)
    }
}

impl Sources {
    /// The config file's sources, compiled (their secret files and variables read): what
    /// `hookd config check` runs, and the first half of [`Sources::load`].
    pub(crate) fn compile_config(
        config: &[SourceSpec],
        limits: Limits,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HashMap<Key, Arc<Source>>, (String, String)> {
        let mut map = HashMap::new();
        for (i, spec) in config.iter().enumerate() {
            let key = format!("sources[{i}]");
            let mut resolved = spec.clone();
            resolved.resolve_files(&format!("{key}."), env)?;
            let (secrets, schema) = (resolved.secrets, resolved.json_schema);
            let mut shown = spec.clone();
            shown.secrets.clear();
            let source = Source::compile(shown, secrets, schema, true, limits)
                .map_err(|e| (key.clone(), e))?;
            let key_of = (TenantId::DEFAULT, spec.name.clone());
            if map.insert(key_of, Arc::new(source)).is_some() {
                return Err((
                    format!("{key}.name"),
                    format!("a second source named {:?}", spec.name),
                ));
            }
        }
        Ok(map)
    }

    /// The config's sources and the stored ones, compiled. A stored source that cannot be
    /// opened (its secrets need a key no longer configured) or compiled stops the start,
    /// naming it: serving without it would answer its provider 404.
    pub fn load(
        config: &[SourceSpec],
        stored: Vec<(ObjectRef, Vec<u8>)>,
        engine: EngineHandle,
        sealer: Option<Arc<Sealer>>,
        limits: Limits,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, (String, String)> {
        let mut map = Self::compile_config(config, limits, env)?;
        for (object, bytes) in stored {
            let (tenant, name) = (object.tenant, object.name);
            let key = format!("stored source {name:?} of tenant #{}", tenant.0);
            if map.contains_key(&(tenant, name.clone())) {
                tracing::warn!(
                    source = %name,
                    "a source made over gRPC has the name of one in the config file; the config file's is used"
                );
                continue;
            }
            let spec: SourceSpec = serde_json::from_slice(&bytes)
                .map_err(|e| (key.clone(), format!("unreadable: {e}")))?;
            let mut secrets = Vec::with_capacity(spec.secrets.len());
            for s in &spec.secrets {
                secrets.push(
                    hookd_core::secrets::open(sealer.as_deref(), &aad(tenant, &name), s).map_err(
                        |e| (key.clone(), format!("{e}; add that key to [secrets] keys")),
                    )?,
                );
            }
            let schema = spec.json_schema.clone();
            let mut shown = spec;
            shown.secrets.clear();
            let source = Source::compile(shown, secrets, schema, false, limits).map_err(|e| {
                (
                    key.clone(),
                    format!("{e} (was the config changed since it was made? restore the limit, or delete the source)"),
                )
            })?;
            let tenant_name = tenant_name(&engine, tenant);
            map.insert((tenant, name), Arc::new(source.of(tenant, &tenant_name)));
        }
        Ok(Self {
            map: RwLock::new(map),
            write: tokio::sync::Mutex::new(()),
            engine,
            sealer,
            limits,
        })
    }

    pub fn get(&self, tenant: TenantId, name: &str) -> Option<Arc<Source>> {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(tenant, name.to_owned()))
            .cloned()
    }

    /// How many sources there are, of every tenant.
    pub fn len(&self) -> usize {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every source of a tenant's, by name.
    pub fn list(&self, tenant: TenantId) -> Vec<Arc<Source>> {
        let mut all: Vec<Arc<Source>> = self
            .map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|((t, _), _)| *t == tenant)
            .map(|(_, s)| s.clone())
            .collect();
        all.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        all
    }

    /// Creates or replaces a source (secrets in clear in `spec.secrets`); durable when it
    /// returns. True when it was created.
    pub async fn put(
        &self,
        tenant: TenantId,
        spec: SourceSpec,
    ) -> Result<(Arc<Source>, bool), SourceError> {
        for (key, config_only) in [
            ("secret_env", !spec.secret_env.is_empty()),
            ("secret_files", !spec.secret_files.is_empty()),
            ("json_schema_file", spec.json_schema_file.is_some()),
        ] {
            if config_only {
                return Err(SourceError::Invalid(format!(
                    "{key}: only in the config file; send the value itself"
                )));
            }
        }
        let secrets = spec.secrets.clone();
        let schema = spec.json_schema.clone();
        let mut shown = spec.clone();
        shown.secrets.clear();
        let source = Source::compile(shown, secrets, schema, false, self.limits)
            .map_err(SourceError::Invalid)?
            .of(tenant, &tenant_name(&self.engine, tenant));
        let mut stored = spec;
        hookd_core::secrets::seal_all(
            self.sealer.as_deref(),
            &aad(tenant, &stored.name),
            &mut stored.secrets,
        );
        let _write = self.write.lock().await;
        let name = source.spec.name.clone();
        let created = match self.get(tenant, &name) {
            Some(s) if s.from_config => return Err(SourceError::FromConfig(name)),
            Some(_) => false,
            None => true,
        };
        self.engine.put_source(tenant, &stored).await?;
        let source = Arc::new(source);
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((tenant, name), source.clone());
        Ok((source, created))
    }

    /// Deletes a source made over gRPC; durable when it returns. Events already received
    /// stay where they were routed.
    pub async fn delete(&self, tenant: TenantId, name: &str) -> Result<(), SourceError> {
        let _write = self.write.lock().await;
        match self.get(tenant, name) {
            None => return Err(SourceError::NotFound(name.to_owned())),
            Some(s) if s.from_config => return Err(SourceError::FromConfig(name.to_owned())),
            Some(_) => {}
        }
        self.engine.delete_object(object(tenant, name)).await?;
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&(tenant, name.to_owned()));
        Ok(())
    }

    /// A deleted tenant's sources are gone (the engine removed their objects).
    pub fn forget_tenant(&self, tenant: TenantId) {
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(t, _), _| *t != tenant);
    }

    /// Seals every stored source's secrets under the newest key (at start, after a key
    /// rotation, like endpoints'). How many were rewritten.
    pub async fn reseal(&self, stored: &[(ObjectRef, Vec<u8>)]) -> Result<u32, SourceError> {
        let Some(sealer) = self.sealer.clone() else {
            return Ok(0);
        };
        let _write = self.write.lock().await;
        let mut n = 0;
        for (stored_as, bytes) in stored {
            let (tenant, name) = (stored_as.tenant, stored_as.name.as_str());
            if self.get(tenant, name).is_none_or(|s| s.from_config) {
                continue;
            }
            let Ok(mut spec) = serde_json::from_slice::<SourceSpec>(bytes) else {
                continue;
            };
            if !spec.secrets.iter().any(|s| sealer.needs_reseal(s)) {
                continue;
            }
            for s in &mut spec.secrets {
                let clear = hookd_core::secrets::open(Some(&sealer), &aad(tenant, name), s)
                    .map_err(|e| SourceError::Invalid(format!("source {name:?}: {e}")))?;
                *s = sealer.seal(&aad(tenant, name), &clear);
            }
            self.engine.put_source(tenant, &spec).await?;
            n += 1;
        }
        Ok(n)
    }
}
