//! Event reasons, the Go library's, so existing alerts and `kubectl
//! describe` habits keep working.

pub const PROVISIONING: &str = "Provisioning";
pub const PROVISIONING_SUCCEEDED: &str = "ProvisioningSucceeded";
pub const PROVISIONING_FAILED: &str = "ProvisioningFailed";
pub const PROVISIONING_CLEANUP_FAILED: &str = "ProvisioningCleanupFailed";
pub const VOLUME_FAILED_DELETE: &str = "VolumeFailedDelete";

// External-resizer's, for volume expansion.
pub const RESIZING: &str = "Resizing";
pub const VOLUME_RESIZE_FAILED: &str = "VolumeResizeFailed";
pub const VOLUME_RESIZE_SUCCESSFUL: &str = "VolumeResizeSuccessful";
pub const FILE_SYSTEM_RESIZE_REQUIRED: &str = "FileSystemResizeRequired";

// Ours.
/// Another controller keeps undoing our volume finalizer writes.
pub const VOLUME_FINALIZER_CONFLICT: &str = "FinalizerConflict";
/// A Released volume's storage is on a node that no longer exists.
pub const VOLUME_NODE_GONE: &str = "VolumeNodeGone";
/// A node host cannot tell the scheduler how much room a class has on
/// its node, or has none to give.
pub const NODE_CAPACITY: &str = "NodeCapacity";
