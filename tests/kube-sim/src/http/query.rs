//! Query-string parameters of list, watch and write requests.

use std::collections::HashMap;

use crate::error::{ApiError, ApiResult};

/// Decoded query parameters (empty pairs such as `?&limit=2` are tolerated).
#[derive(Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(q: Option<&str>) -> Self {
        let mut map = HashMap::new();
        for (k, v) in form_urlencoded::parse(q.unwrap_or("").as_bytes()) {
            if !k.is_empty() {
                map.insert(k.into_owned(), v.into_owned());
            }
        }
        Query(map)
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    pub fn str(&self, k: &str) -> &str {
        self.get(k).unwrap_or("")
    }

    pub fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1" | "True"))
    }

    pub fn number(&self, k: &str) -> ApiResult<Option<u64>> {
        match self.get(k) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| ApiError::BadRequest(format!("invalid value for {k}: {v:?}"))),
        }
    }
}
