//! The two Cilium policy kinds weft reads (`cilium.io/v2`), as kube-rs resources. No
//! crate ships them; their bodies stay JSON, because the policy stage's one parser
//! (`weft_state::policy::rule`) reads them the way it reads the directory's files.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

macro_rules! cilium_policy_kind {
    ($(#[$doc:meta])* $name:ident, $plural:literal, $scope:ty) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            /// The object's metadata.
            pub metadata: ObjectMeta,
            /// Everything else (`spec`, `specs`, `status`), as the API sent it.
            #[serde(flatten)]
            pub body: serde_json::Map<String, serde_json::Value>,
        }

        impl kube::Resource for $name {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                stringify!($name).into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                "cilium.io".into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                "v2".into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

cilium_policy_kind!(
    /// `CiliumNetworkPolicy`: a namespaced policy.
    CiliumNetworkPolicy,
    "ciliumnetworkpolicies",
    k8s_openapi::NamespaceResourceScope
);

cilium_policy_kind!(
    /// `CiliumClusterwideNetworkPolicy`: a policy of the whole cluster.
    CiliumClusterwideNetworkPolicy,
    "ciliumclusterwidenetworkpolicies",
    k8s_openapi::ClusterResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource as _;

    #[test]
    fn the_kinds_name_their_api_paths() {
        assert_eq!(
            CiliumNetworkPolicy::url_path(&(), Some("shop")),
            "/apis/cilium.io/v2/namespaces/shop/ciliumnetworkpolicies"
        );
        assert_eq!(
            CiliumClusterwideNetworkPolicy::url_path(&(), None),
            "/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies"
        );
        let cnp: CiliumNetworkPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"endpointSelector": {}},
        }))
        .unwrap();
        assert_eq!(cnp.metadata.name.as_deref(), Some("web"));
        assert!(cnp.body.contains_key("spec"));
    }
}
