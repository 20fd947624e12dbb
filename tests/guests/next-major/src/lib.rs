//! A plugin of a future, incompatible contract: it exports
//! `wasmprov:provisioner/plugin@1.0.0`, while the host implements 0.1.x (for
//! 0.x, only the same minor version is compatible). The host must refuse to
//! load it with a message naming both versions.

wit_bindgen::generate!({
    inline: r#"
        package wasmprov:provisioner@1.0.0;

        interface plugin {
            record plugin-capabilities {
                block-volumes: bool,
            }

            capabilities: func() -> plugin-capabilities;
        }

        world provisioner {
            export plugin;
        }
    "#,
    world: "provisioner",
});

use exports::wasmprov::provisioner::plugin::{Guest, PluginCapabilities};

struct NextMajor;

impl Guest for NextMajor {
    fn capabilities() -> PluginCapabilities {
        PluginCapabilities {
            block_volumes: false,
        }
    }
}

export!(NextMajor);
