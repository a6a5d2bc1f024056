//! `--db` as the tool may print it: no password, however the user spelled it.
//!
//! The drivers disagree on where a URL's user info ends: tokio-postgres (like libpq, loosely)
//! takes everything up to the first `@` as credentials, the `url` crate the redis driver uses
//! stops the authority at the first `/`, `?` or `#`, and a user who wrote an unencoded `@`,
//! `?` or `/` in a password meant all of it. So the printed form hides everything up to the
//! LAST `@` after the scheme (a superset of what any of them reads as credentials), keeps
//! the user name only when it is a plain name, and replaces the value of every parameter
//! whose name holds `password`. Over-hiding (an `@` in a query value) costs only detail.
//!
//! A libpq key=value connection string (`host=db password=...`) is re-printed from its parsed
//! pairs, with password values hidden; one that does not parse is not printed at all.

use std::borrow::Cow;

/// The hidden part of a value.
const HIDDEN: &str = "***";

/// Keywords of a PostgreSQL key=value connection string (those tokio-postgres accepts).
const CONNINFO_KEYWORDS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslcert",
    "sslkey",
    "sslmode",
    "sslnegotiation",
    "sslrootcert",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "replication",
];

/// `db` (a URL, a key=value connection string or a file path) without any password.
pub(crate) fn redact(db: &str) -> String {
    if let Some((scheme, rest)) = db.split_once("://") {
        redact_url(scheme, rest)
    } else if let Some(pairs) = conninfo_pairs(db) {
        pairs
            .iter()
            .map(|(key, value)| {
                if is_secret(key) {
                    format!("{key}={HIDDEN}")
                } else {
                    format!("{key}={}", quote_conninfo(value))
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    } else if looks_like_conninfo(db) {
        "(a PostgreSQL connection string that does not parse)".to_owned()
    } else {
        db.to_owned()
    }
}

/// Whether `db` is meant as a PostgreSQL key=value connection string: it starts with one of
/// libpq's keywords followed by `=`. Such a string is never a file path the tool opens.
pub(crate) fn looks_like_conninfo(db: &str) -> bool {
    let start = db.trim_start();
    let keyword_end = start
        .find(|c: char| c == '=' || c.is_whitespace())
        .unwrap_or(start.len());
    let (keyword, after) = start.split_at(keyword_end);
    CONNINFO_KEYWORDS.contains(&keyword) && after.trim_start().starts_with('=')
}

/// Whether a parameter named `key` carries a secret.
fn is_secret(key: &str) -> bool {
    key.to_ascii_lowercase().contains("password")
}

fn redact_url(scheme: &str, rest: &str) -> String {
    let scheme_ok = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        // Not a URL the tool knows how to take apart: print nothing of it.
        return "(a URL that does not parse)".to_owned();
    }
    // First the parameters: every `name=value` after a `?` or `&` anywhere (even one inside
    // a password) whose name holds `password` loses its value up to the next `&`, so a
    // secret value holding `@` cannot move the end of the user info below.
    let mut params = String::with_capacity(rest.len());
    let mut after_separator = false;
    // Inside a hidden value: it runs to the next `&` (a `?` in it is part of it).
    let mut hiding = false;
    for piece in rest.split_inclusive(['?', '&']) {
        let (body, separator) = match piece.char_indices().last() {
            Some((i, c)) if c == '?' || c == '&' => (&piece[..i], Some(c)),
            _ => (piece, None),
        };
        if !hiding {
            match body.split_once('=') {
                Some((name, _)) if after_separator && is_secret(&percent_decode(name)) => {
                    params.push_str(name);
                    params.push('=');
                    params.push_str(HIDDEN);
                    hiding = true;
                }
                _ => params.push_str(body),
            }
        }
        if separator == Some('&') {
            hiding = false;
        }
        if let Some(separator) = separator.filter(|_| !hiding) {
            params.push(separator);
        }
        after_separator = separator.is_some();
    }
    let (userinfo, after) = match params.rfind('@') {
        Some(at) => (Some(&params[..at]), &params[at + 1..]),
        None => (None, params.as_str()),
    };
    let mut out = format!("{scheme}://");
    if let Some(userinfo) = userinfo {
        let (user, has_password) = match userinfo.split_once(':') {
            Some((user, _)) => (user, true),
            None => (userinfo, false),
        };
        let plain = !user.contains(['@', '/', '?', '#', '&', '=', '*']);
        out.push_str(if plain { user } else { HIDDEN });
        if has_password {
            out.push(':');
            out.push_str(HIDDEN);
        }
        out.push('@');
    }
    out.push_str(after);
    out
}

fn percent_decode(s: &str) -> Cow<'_, str> {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy()
}

/// The pairs of a key=value connection string as tokio-postgres reads them (keyword up to
/// `=` or a space; a value plain up to a space, or quoted in `'...'`; `\` escapes the next
/// character), or `None` if `db` is not one.
fn conninfo_pairs(db: &str) -> Option<Vec<(String, String)>> {
    if !looks_like_conninfo(db) {
        return None;
    }
    let mut pairs = Vec::new();
    let mut chars = db.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut keyword = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            keyword.push(c);
        }
        if keyword.is_empty() {
            break;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        chars.next_if_eq(&'=')?;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next()? {
                    '\'' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        value.push(escaped);
                    }
                } else {
                    value.push(c);
                }
            }
            if value.is_empty() {
                return None;
            }
        }
        pairs.push((keyword, value));
    }
    Some(pairs)
}

/// A conninfo value as it can be read back.
fn quote_conninfo(value: &str) -> String {
    if !value.is_empty() && !value.contains(|c: char| c.is_whitespace() || c == '\'' || c == '\\') {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Passwords with every character that moves a naive parser's idea of where the user
    /// info ends, and the forms a password can take.
    const SECRETS: &[&str] = &[
        "S3cr?t-pw",
        "pa#Xq9",
        "p%40Zk7",
        "pa/Qw7",
        "p@Vx8",
        "a1?b2#c3/d4@e5",
    ];

    #[test]
    fn passwords_never_survive_redaction() {
        for secret in SECRETS {
            let cases = [
                format!("postgres://app:{secret}@host:5432/db"),
                format!("postgresql://app:{secret}@host/db?sslmode=disable"),
                format!("postgres://:{secret}@host/db"),
                format!("redis://:{secret}@127.0.0.1:6379/0"),
                format!("redis://user:{secret}@127.0.0.1:6379"),
                format!("postgres://host/db?user=app&password={secret}&x=1"),
                format!("postgres://host/db?pass%77ord={secret}"),
                format!("host=127.0.0.1 port=1 user=app password={secret} dbname=test"),
                format!("host=127.0.0.1 password='{secret} with space' dbname=test"),
                format!("password = {secret} host=h"),
            ];
            for case in cases {
                let shown = redact(&case);
                assert!(!shown.contains(secret), "{case} printed as {shown}");
                // The part of the secret after a character a parser may split at.
                for piece in secret.split(['?', '#', '/', '@']).skip(1) {
                    assert!(!shown.contains(piece), "{case} printed as {shown}");
                }
            }
        }
    }

    #[test]
    fn the_rest_of_the_url_is_kept() {
        assert_eq!(
            redact("postgres://user:secret@host:5432/db"),
            "postgres://user:***@host:5432/db"
        );
        assert_eq!(
            redact("postgres://app:S3cr?t-pw@host/db"),
            "postgres://app:***@host/db"
        );
        assert_eq!(redact("postgres://user@host/db"), "postgres://user@host/db");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:pw@host"), "redis://:***@host");
        assert_eq!(redact("plain/path"), "plain/path");
        assert_eq!(
            redact("postgres://host/db?user=u&password=secret&x=1"),
            "postgres://host/db?user=u&password=***&x=1"
        );
        assert_eq!(
            redact("host=h port=5432 password='a b' dbname=test"),
            "host=h port=5432 password=*** dbname=test"
        );
        assert_eq!(
            redact("host=h password='unterminated"),
            "(a PostgreSQL connection string that does not parse)"
        );
    }

    #[test]
    fn connection_strings_are_told_from_paths() {
        assert!(looks_like_conninfo("host=127.0.0.1 dbname=test"));
        assert!(looks_like_conninfo(" password = x"));
        assert!(!looks_like_conninfo("drill.sqlite"));
        assert!(!looks_like_conninfo("data=1.sqlite"));
        assert!(!looks_like_conninfo("/tmp/host=x"));
    }
}
