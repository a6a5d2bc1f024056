//! Key extractors for a [`GuardLayer`](super::GuardLayer): a path segment, a header, a query
//! parameter, parsed with [`FromStr`].
//!
//! Each decodes as axum's extractors do (path segments and query parameters percent-decoded,
//! `+` a space in a query), so the key the layer asks about is the key a handler's `Path` or
//! `Query` sees; a header is its value as text (a typed header that parses its value
//! differently, such as a bearer token without its scheme, needs a closure of your own). A request whose key is missing, appears twice or does
//! not parse passes through to the service, which answers it as it would without the layer.
//!
//! # Examples
//!
//! ```
//! use cuckoo_guard::tower::{key, ExtractKey};
//!
//! let (parts, ()) = http::Request::builder()
//!     .uri("/users/a%20b?id=7&name=x+y")
//!     .header("x-user", "42")
//!     .body(())?
//!     .into_parts();
//! assert_eq!(key::path_segment::<String>(1).extract(&parts).as_deref(), Some("a b"));
//! assert_eq!(key::query::<u32>("id").extract(&parts), Some(7));
//! assert_eq!(key::query::<String>("name").extract(&parts).as_deref(), Some("x y"));
//! assert_eq!(key::header::<u64>("X-User").extract(&parts), Some(42));
//! assert_eq!(key::query::<u32>("name").extract(&parts), None); // does not parse: passes
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use http::request::Parts;
use percent_encoding::percent_decode_str;

use super::ExtractKey;

/// The path segment at `index` (0 is the first after the leading `/`), percent-decoded and
/// parsed as `T`: the value of a one-segment path parameter such as axum's `{id}` (not of a
/// catch-all `{*rest}`, which spans segments). The path is the one the layer's router sees:
/// a router nested in another sees it without the nesting prefix, the outer router with it
/// (see the [placement notes](super#the-key-must-be-the-handlers-key)).
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::{key, ExtractKey};
///
/// let (parts, ()) = http::Request::builder().uri("/users/42/posts").body(())?.into_parts();
/// assert_eq!(key::path_segment::<u64>(1).extract(&parts), Some(42));
/// assert_eq!(key::path_segment::<u64>(3).extract(&parts), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn path_segment<T: FromStr>(index: usize) -> PathSegment<T> {
    PathSegment {
        index,
        key: PhantomData,
    }
}

/// The value of the header `name` (case-insensitive), parsed as `T`.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::{key, ExtractKey};
///
/// let (parts, ()) = http::Request::builder().header("x-api-key", "k1").body(())?.into_parts();
/// assert_eq!(key::header::<String>("x-api-key").extract(&parts).as_deref(), Some("k1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn header<T: FromStr>(name: &str) -> Header<T> {
    Header {
        name: name.to_ascii_lowercase(),
        key: PhantomData,
    }
}

/// The query parameter `name`, form-decoded and parsed as `T`. A parameter given twice is
/// ambiguous and passes through.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::{key, ExtractKey};
///
/// let (parts, ()) = http::Request::builder().uri("/items?sku=ab%2F1").body(())?.into_parts();
/// assert_eq!(key::query::<String>("sku").extract(&parts).as_deref(), Some("ab/1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn query<T: FromStr>(name: &str) -> Query<T> {
    Query {
        name: name.to_owned(),
        key: PhantomData,
    }
}

/// Made by [`path_segment`].
///
/// # Examples
///
/// ```
/// let extract: cuckoo_guard::tower::key::PathSegment<u64> = cuckoo_guard::tower::key::path_segment(1);
/// # let _ = extract;
/// ```
pub struct PathSegment<T> {
    index: usize,
    key: PhantomData<fn() -> T>,
}

/// Made by [`header`].
///
/// # Examples
///
/// ```
/// let extract: cuckoo_guard::tower::key::Header<String> = cuckoo_guard::tower::key::header("x-user");
/// # let _ = extract;
/// ```
pub struct Header<T> {
    name: String,
    key: PhantomData<fn() -> T>,
}

/// Made by [`query`].
///
/// # Examples
///
/// ```
/// let extract: cuckoo_guard::tower::key::Query<u32> = cuckoo_guard::tower::key::query("id");
/// # let _ = extract;
/// ```
pub struct Query<T> {
    name: String,
    key: PhantomData<fn() -> T>,
}

impl<T: FromStr> ExtractKey for PathSegment<T> {
    type Key = T;

    fn extract(&self, parts: &Parts) -> Option<T> {
        let path = parts.uri.path();
        let segment = path.strip_prefix('/')?.split('/').nth(self.index)?;
        percent_decode_str(segment).decode_utf8().ok()?.parse().ok()
    }
}

impl<T: FromStr> ExtractKey for Header<T> {
    type Key = T;

    fn extract(&self, parts: &Parts) -> Option<T> {
        let mut values = parts.headers.get_all(self.name.as_str()).iter();
        let value = values.next()?;
        if values.next().is_some() {
            return None;
        }
        value.to_str().ok()?.parse().ok()
    }
}

impl<T: FromStr> ExtractKey for Query<T> {
    type Key = T;

    fn extract(&self, parts: &Parts) -> Option<T> {
        let query = parts.uri.query()?;
        let mut values = form_urlencoded::parse(query.as_bytes())
            .filter(|(name, _)| *name == self.name)
            .map(|(_, value)| value);
        let value = values.next()?;
        if values.next().is_some() {
            return None;
        }
        value.parse().ok()
    }
}

macro_rules! extractor_impls {
    ($($name:ident { $($field:ident),* }),*) => {$(
        impl<T> Clone for $name<T> {
            fn clone(&self) -> Self {
                Self { $($field: self.$field.clone(),)* key: PhantomData }
            }
        }

        impl<T> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    $(.field(stringify!($field), &self.$field))*
                    .field("key", &std::any::type_name::<T>())
                    .finish()
            }
        }
    )*};
}

extractor_impls!(PathSegment { index }, Header { name }, Query { name });

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder().uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn path_segments_count_from_the_first_after_the_slash() {
        let p = parts("/users/42/", &[]);
        assert_eq!(
            path_segment::<String>(0).extract(&p).as_deref(),
            Some("users")
        );
        assert_eq!(path_segment::<u64>(1).extract(&p), Some(42));
        assert_eq!(path_segment::<String>(2).extract(&p).as_deref(), Some(""));
        assert_eq!(path_segment::<String>(3).extract(&p), None);
    }

    #[test]
    fn path_segments_are_percent_decoded_and_bad_utf8_passes() {
        let p = parts("/k/%E2%9C%93%2Fx/%FF", &[]);
        assert_eq!(
            path_segment::<String>(1).extract(&p).as_deref(),
            Some("✓/x")
        );
        assert_eq!(path_segment::<String>(2).extract(&p), None);
    }

    #[test]
    fn a_repeated_header_or_query_parameter_passes() {
        let p = parts("/?id=1&id=2&one=3", &[("x-k", "1"), ("x-k", "2")]);
        assert_eq!(query::<u32>("id").extract(&p), None);
        assert_eq!(query::<u32>("one").extract(&p), Some(3));
        assert_eq!(query::<u32>("missing").extract(&p), None);
        assert_eq!(header::<u32>("x-k").extract(&p), None);
    }

    #[test]
    fn an_invalid_header_name_finds_nothing() {
        let p = parts("/", &[("x-k", "1")]);
        assert_eq!(header::<u32>("bad name\n").extract(&p), None);
        assert_eq!(header::<u32>("").extract(&p), None);
    }
}
