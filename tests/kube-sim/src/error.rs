//! API errors, rendered on the wire as `meta/v1` `Status` objects exactly like
//! kube-apiserver does (clients branch on `code` and `reason`).

use serde_json::{json, Value};

/// Which object an error is about (`Status.details`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name, e.g. `persistentvolumeclaims` (what the real server puts in `details.kind`).
    pub resource: String,
    /// Object name, may be empty.
    pub name: String,
}

impl Target {
    pub fn new(group: &str, resource: &str, name: &str) -> Self {
        Target {
            group: group.to_string(),
            resource: resource.to_string(),
            name: name.to_string(),
        }
    }

    /// `persistentvolumeclaims "x"` or `leases.coordination.k8s.io "x"`, as in real messages.
    fn qualified(&self) -> String {
        self.qualified_as(&self.resource)
    }

    /// The same with `what` for the resource (e.g. the Kind).
    fn qualified_as(&self, what: &str) -> String {
        if self.group.is_empty() {
            format!("{what} \"{}\"", self.name)
        } else {
            format!("{what}.{} \"{}\"", self.group, self.name)
        }
    }
}

/// One entry of `Status.details.causes`: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// e.g. `FieldValueRequired`, `FieldManagerConflict`.
    pub reason: String,
    pub message: String,
    /// e.g. `spec.accessModes`, or `.metadata.labels.x` for apply conflicts.
    pub field: String,
}

impl Cause {
    /// A validation error written as kube-apiserver words it,
    /// `FIELD: TYPE[: DETAIL]` (`spec.accessModes: Required value: …`).
    pub fn from_field_error(error: &str) -> Cause {
        const TYPES: &[(&str, &str)] = &[
            ("Required value", "FieldValueRequired"),
            ("Invalid value", "FieldValueInvalid"),
            ("Forbidden", "FieldValueForbidden"),
            ("Unsupported value", "FieldValueNotSupported"),
            ("Duplicate value", "FieldValueDuplicate"),
            ("Too long", "FieldValueTooLong"),
            ("Too many", "FieldValueTooMany"),
            ("Not found", "FieldValueNotFound"),
        ];
        let (field, message) = error.split_once(": ").unwrap_or(("", error));
        let reason = TYPES
            .iter()
            .find(|(text, _)| message.starts_with(text))
            .map_or("FieldValueInvalid", |(_, reason)| reason);
        Cause {
            reason: reason.to_owned(),
            message: message.to_owned(),
            field: field.to_owned(),
        }
    }
}

/// Field errors as kube-apiserver lists them in a message: `f: m` for one,
/// `[f: m, g: n]` for several.
fn field_errors(causes: &[Cause]) -> String {
    let each: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    match each.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", each.join(", ")),
    }
}

/// Every failure the simulated API server can answer with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{} not found", .0.qualified())]
    NotFound(Target),
    #[error("{} already exists", .0.qualified())]
    AlreadyExists(Target),
    #[error("Operation cannot be fulfilled on {}: {message}", .target.qualified())]
    Conflict { target: Target, message: String },
    /// 422: validation failed. `kind` is the object's Kind (real messages use it here).
    #[error("{} is invalid: {}", .target.qualified_as(.kind), field_errors(.causes))]
    Invalid {
        target: Target,
        kind: &'static str,
        /// One per field error; the message lists them.
        causes: Vec<Cause>,
    },
    /// 409 for a DELETE whose preconditions do not hold: unlike other
    /// conflicts, kube-apiserver names the object by its Kind here.
    #[error("Operation cannot be fulfilled on {}: {message}", .target.qualified_as(.kind))]
    PreconditionFailed {
        target: Target,
        kind: &'static str,
        message: String,
    },
    /// 409 from server-side apply: fields another manager owns. Unlike
    /// other conflicts its Status names no object, only the fields.
    #[error("{message}")]
    ApplyConflict { message: String, causes: Vec<Cause> },
    /// 422 for patches that cannot be applied (JSON patch `test` failures included).
    #[error("{0}")]
    PatchFailed(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    /// 410 for expired continue tokens and list snapshots.
    #[error("{0}")]
    Expired(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error(
        "the body of the request was in an unknown format - accepted media types include: {0}"
    )]
    UnsupportedMediaType(String),
    #[error("the server could not find the requested resource")]
    NotAcceptable,
    #[error("the server could not find the requested resource")]
    UnknownPath,
    #[error("{0}")]
    Internal(String),
    #[error("{0}")]
    TooManyRequests(String),
    #[error("{0}")]
    ServiceUnavailable(String),
    #[error("Request entity too large: limit is {0}")]
    RequestEntityTooLarge(usize),
}

impl ApiError {
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound(_) | ApiError::UnknownPath => 404,
            ApiError::AlreadyExists(_)
            | ApiError::Conflict { .. }
            | ApiError::PreconditionFailed { .. }
            | ApiError::ApplyConflict { .. } => 409,
            ApiError::Invalid { .. } | ApiError::PatchFailed(_) => 422,
            ApiError::BadRequest(_) => 400,
            ApiError::Forbidden(_) => 403,
            ApiError::Expired(_) => 410,
            ApiError::MethodNotAllowed => 405,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::NotAcceptable => 406,
            ApiError::Internal(_) => 500,
            ApiError::TooManyRequests(_) => 429,
            ApiError::ServiceUnavailable(_) => 503,
            ApiError::RequestEntityTooLarge(_) => 413,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound(_) | ApiError::UnknownPath => "NotFound",
            ApiError::AlreadyExists(_) => "AlreadyExists",
            ApiError::Conflict { .. }
            | ApiError::PreconditionFailed { .. }
            | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::Invalid { .. } | ApiError::PatchFailed(_) => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::Expired(_) => "Expired",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::NotAcceptable => "NotAcceptable",
            ApiError::Internal(_) => "InternalError",
            ApiError::TooManyRequests(_) => "TooManyRequests",
            ApiError::ServiceUnavailable(_) => "ServiceUnavailable",
            ApiError::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
        }
    }

    pub fn conflict_modified(target: Target) -> Self {
        ApiError::Conflict {
            target,
            message: "the object has been modified; please apply your changes to the latest version and try again".into(),
        }
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let target = match self {
            ApiError::NotFound(t) | ApiError::AlreadyExists(t) => Some((t, None)),
            ApiError::Conflict { target, .. } => Some((target, None)),
            ApiError::Invalid { target, kind, .. }
            | ApiError::PreconditionFailed { target, kind, .. } => Some((target, Some(*kind))),
            _ => None,
        };
        if let Some((t, kind)) = target {
            let mut details = json!({ "name": t.name, "kind": kind.unwrap_or(&t.resource) });
            if !t.group.is_empty() {
                details["group"] = json!(t.group);
            }
            status["details"] = details;
        }
        let causes = match self {
            ApiError::Invalid { causes, .. } | ApiError::ApplyConflict { causes, .. } => {
                causes.as_slice()
            }
            _ => &[],
        };
        if !causes.is_empty() {
            status["details"]["causes"] = causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
        }
        status
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
