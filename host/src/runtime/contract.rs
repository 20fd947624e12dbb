//! The hooks of one component, whichever contract version it was built
//! against: each version's exports carry their version in their names, so
//! they are found by different generated code, but they take and return the
//! same Rust types (see [`super::bindings`]).

use wasmtime::component::{Instance, InstancePre};
use wasmtime::Store;

use super::bindings::types::{
    DeleteError, DeleteRequest, PluginCapabilities, ProvisionError, ProvisionRequest, ResizeError,
    ResizeRequest, ResizedVolume, Volume,
};
use super::bindings::{
    v0_1, v0_2, v0_3, CapacityReport, CapacityRequest, CAPACITY_INTERFACE, RESIZER_INTERFACE,
};
use super::inspect::Optional;
use super::sandbox::CallState;

type PluginV0_1 = v0_1::exports::wasmprov::provisioner::plugin::GuestIndices;
type PluginV0_2 = v0_2::exports::wasmprov::provisioner::plugin::GuestIndices;
type PluginV0_3 = v0_3::exports::wasmprov::provisioner::plugin::GuestIndices;
type ResizerV0_2 = v0_2::exports::wasmprov::provisioner::resizer::GuestIndices;
type ResizerV0_3 = v0_3::exports::wasmprov::provisioner::resizer::GuestIndices;
type CapacityV0_3 = v0_3::exports::wasmprov::provisioner::capacity::GuestIndices;

/// A component linked against the sandbox, with its exports looked up once.
#[derive(Clone)]
pub(crate) struct Hooks {
    pre: InstancePre<CallState>,
    plugin: PluginExport,
    /// `None`: the component does not export `resizer` (0.1 has none).
    resizer: Option<ResizerExport>,
    /// `None`: the component does not export `capacity` (new in 0.3).
    capacity: Option<CapacityV0_3>,
}

#[derive(Clone)]
enum PluginExport {
    V0_1(PluginV0_1),
    V0_2(PluginV0_2),
    V0_3(PluginV0_3),
}

#[derive(Clone)]
enum ResizerExport {
    V0_2(ResizerV0_2),
    V0_3(ResizerV0_3),
}

impl Hooks {
    /// Looks up the exports of a component built against `version` (already
    /// checked to be one this host supports, with `optional` exports only
    /// where that version has them). Fails if their signatures differ from
    /// the contract's.
    pub(crate) fn new(
        pre: InstancePre<CallState>,
        version: &str,
        optional: Optional,
    ) -> wasmtime::Result<Self> {
        let hooks = if version.starts_with("0.1.") {
            Self {
                plugin: PluginExport::V0_1(PluginV0_1::new(&pre)?),
                resizer: None,
                capacity: None,
                pre,
            }
        } else if version.starts_with("0.2.") {
            let resizer = optional.resizer.then(|| ResizerV0_2::new(&pre));
            Self {
                plugin: PluginExport::V0_2(PluginV0_2::new(&pre)?),
                resizer: resizer.transpose()?.map(ResizerExport::V0_2),
                capacity: None,
                pre,
            }
        } else {
            let resizer = optional.resizer.then(|| ResizerV0_3::new(&pre));
            let capacity = optional.capacity.then(|| CapacityV0_3::new(&pre));
            Self {
                plugin: PluginExport::V0_3(PluginV0_3::new(&pre)?),
                resizer: resizer.transpose()?.map(ResizerExport::V0_3),
                capacity: capacity.transpose()?,
                pre,
            }
        };
        Ok(hooks)
    }

    pub(crate) fn has_resizer(&self) -> bool {
        self.resizer.is_some()
    }

    pub(crate) fn has_capacity(&self) -> bool {
        self.capacity.is_some()
    }

    pub(crate) fn engine(&self) -> &wasmtime::Engine {
        self.pre.engine()
    }

    async fn instantiate(&self, store: &mut Store<CallState>) -> wasmtime::Result<Instance> {
        self.pre.instantiate_async(store).await
    }

    pub(crate) async fn capabilities(
        &self,
        store: &mut Store<CallState>,
    ) -> wasmtime::Result<PluginCapabilities> {
        let instance = self.instantiate(store).await?;
        match &self.plugin {
            PluginExport::V0_1(i) => {
                i.load(&mut *store, &instance)?
                    .call_capabilities(store)
                    .await
            }
            PluginExport::V0_2(i) => {
                i.load(&mut *store, &instance)?
                    .call_capabilities(store)
                    .await
            }
            PluginExport::V0_3(i) => {
                i.load(&mut *store, &instance)?
                    .call_capabilities(store)
                    .await
            }
        }
    }

    pub(crate) async fn provision(
        &self,
        store: &mut Store<CallState>,
        request: &ProvisionRequest,
    ) -> wasmtime::Result<Result<Volume, ProvisionError>> {
        let instance = self.instantiate(store).await?;
        match &self.plugin {
            PluginExport::V0_1(i) => {
                i.load(&mut *store, &instance)?
                    .call_provision(store, request)
                    .await
            }
            PluginExport::V0_2(i) => {
                i.load(&mut *store, &instance)?
                    .call_provision(store, request)
                    .await
            }
            PluginExport::V0_3(i) => {
                i.load(&mut *store, &instance)?
                    .call_provision(store, request)
                    .await
            }
        }
    }

    pub(crate) async fn delete(
        &self,
        store: &mut Store<CallState>,
        request: &DeleteRequest,
    ) -> wasmtime::Result<Result<(), DeleteError>> {
        let instance = self.instantiate(store).await?;
        match &self.plugin {
            PluginExport::V0_1(i) => {
                i.load(&mut *store, &instance)?
                    .call_delete(store, request)
                    .await
            }
            PluginExport::V0_2(i) => {
                i.load(&mut *store, &instance)?
                    .call_delete(store, request)
                    .await
            }
            PluginExport::V0_3(i) => {
                i.load(&mut *store, &instance)?
                    .call_delete(store, request)
                    .await
            }
        }
    }

    /// Fails like a trap if the component has no `resizer` export: callers
    /// check [`Hooks::has_resizer`] first.
    pub(crate) async fn resize(
        &self,
        store: &mut Store<CallState>,
        request: &ResizeRequest,
    ) -> wasmtime::Result<Result<ResizedVolume, ResizeError>> {
        let Some(resizer) = &self.resizer else {
            wasmtime::bail!("the component does not export {RESIZER_INTERFACE}");
        };
        let instance = self.instantiate(store).await?;
        match resizer {
            ResizerExport::V0_2(i) => {
                i.load(&mut *store, &instance)?
                    .call_resize(store, request)
                    .await
            }
            ResizerExport::V0_3(i) => {
                i.load(&mut *store, &instance)?
                    .call_resize(store, request)
                    .await
            }
        }
    }

    /// Fails like a trap if the component has no `capacity` export: callers
    /// check [`Hooks::has_capacity`] first.
    pub(crate) async fn capacity(
        &self,
        store: &mut Store<CallState>,
        request: &CapacityRequest,
    ) -> wasmtime::Result<Result<Option<CapacityReport>, String>> {
        let Some(indices) = &self.capacity else {
            wasmtime::bail!("the component does not export {CAPACITY_INTERFACE}");
        };
        let instance = self.instantiate(store).await?;
        indices
            .load(&mut *store, &instance)?
            .call_capacity(store, request)
            .await
    }
}
