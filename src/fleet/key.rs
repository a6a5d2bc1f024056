//! [`FleetKey`]: how a key travels in a fleet's log.

/// A key that can be announced to a fleet: encoded to bytes by the guard that writes it and
/// decoded by every other member. Every member of a fleet must use the same key type.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::fleet::FleetKey;
///
/// let mut bytes = Vec::new();
/// 42i64.encode(&mut bytes);
/// assert_eq!(i64::decode(&bytes), Some(42));
/// assert_eq!(String::decode(b"ada"), Some(String::from("ada")));
/// assert_eq!(u32::decode(b"too long for a u32"), None);
/// ```
pub trait FleetKey: std::hash::Hash + Sized {
    /// Appends the key's bytes to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// The key `bytes` encode, or `None` if they encode none of this type.
    fn decode(bytes: &[u8]) -> Option<Self>;
}

macro_rules! fleet_key_int {
    ($($t:ty),*) => {$(
        impl FleetKey for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }

            fn decode(bytes: &[u8]) -> Option<Self> {
                Some(<$t>::from_be_bytes(bytes.try_into().ok()?))
            }
        }
    )*};
}

fleet_key_int!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128);

impl FleetKey for String {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

impl FleetKey for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        Some(bytes.to_vec())
    }
}

/// Encodes `key` into a new vector.
pub(crate) fn encoded<K: FleetKey>(key: &K) -> Vec<u8> {
    let mut out = Vec::new();
    key.encode(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<K: FleetKey + PartialEq + std::fmt::Debug>(key: K) {
        assert_eq!(K::decode(&encoded(&key)), Some(key));
    }

    #[test]
    fn keys_round_trip() {
        round_trip(0u8);
        round_trip(u64::MAX);
        round_trip(-7i64);
        round_trip(i128::MIN);
        round_trip(String::from("user:42"));
        round_trip(String::new());
        round_trip(vec![0u8, 255, 3]);
    }

    #[test]
    fn wrong_widths_and_bad_utf8_decode_to_none() {
        assert_eq!(u64::decode(&[1, 2, 3]), None);
        assert_eq!(i16::decode(&[]), None);
        assert_eq!(String::decode(&[0xff, 0xfe]), None);
    }
}
