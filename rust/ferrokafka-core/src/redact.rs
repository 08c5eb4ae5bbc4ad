//! What a log line or an error message may not show, and how it is cut out.
//!
//! Secrets reach text in three ways: a configuration value echoed whole (librdkafka quoting the
//! `sasl.oauthbearer.config` it could not parse), credentials written into a URL
//! (`https://user:pass@host/token`, which librdkafka prints whenever the OIDC token endpoint
//! fails), and secret parameters in a query string or a `name=value` list
//! (`?client_secret=...`). [`redact`] removes all three from any text, so every log line and
//! every exception goes through this one function; what it keeps (the host, the key's name, the
//! rest of the message) is what makes the text useful.
//!
//! The rules, in order:
//! 1. every occurrence of a known secret value (see [`secrets_in_value`]; values shorter than
//!    [`MIN_SECRET_LEN`] characters are not searched for, they would blank out ordinary words);
//! 2. a URL's userinfo: everything between `://` and the last `@` of the same word (a word ends
//!    at whitespace or a quote), so a password containing `/` or `@` is cut whole;
//! 3. the value of every `name=value` (or `name = value`) whose name is secret by
//!    [`is_sensitive_key`] or [`is_secret_parameter`], up to the next `&`, `#`, `,`, `;`,
//!    closing bracket, quote or whitespace.
//!
//! Each is replaced by [`REDACTED`]. Pure: the caller supplies the known secret values.

use std::borrow::Cow;

/// What text shows in place of a hidden value.
pub const REDACTED: &str = "[redacted]";

/// Known secret values shorter than this are not searched for in text.
pub const MIN_SECRET_LEN: usize = 4;

/// Whether the value of the configuration key `key` is a secret that no error or log may show:
/// a name containing `pass` (password, passphrase and their misspellings), `secret`, `token` or
/// `key`, in any case, or librdkafka's other sensitive property `sasl.oauthbearer.config`.
pub fn is_sensitive_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "secret", "token", "key"]
        .iter()
        .any(|word| key.contains(word))
        || key == "sasl.oauthbearer.config"
}

/// Whether a URL query or form parameter named `name` carries a secret, in any case: a name
/// containing `pass`, `pwd`, `secret`, `token`, `key`, `assertion`, `credential` or
/// `signature` (OAuth's `client_secret`, `client_assertion`, `access_token`, `api_key`, signed
/// URLs' `X-Amz-Signature`...), or exactly `sig`.
pub fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "pass",
        "pwd",
        "secret",
        "token",
        "key",
        "assertion",
        "credential",
        "signature",
    ]
    .iter()
    .any(|word| name.contains(word))
        || name == "sig"
}

/// The parts of the configuration value `value` of `key` that text must never show: nothing
/// for a key that is not sensitive; for a URL, the password of its userinfo and its secret
/// query parameters' values (its host stays visible); otherwise each of its whitespace-separated
/// words and each tail of the value from a word on, the whole value first (librdkafka quotes
/// `sasl.oauthbearer.config` from the word it could not parse to the end).
pub fn secrets_in_value<'a>(key: &str, value: &'a str) -> Vec<&'a str> {
    if !is_sensitive_key(key) {
        return Vec::new();
    }
    let mut secrets = Vec::new();
    if let Some(scheme_end) = value.find("://") {
        let rest = &value[scheme_end + 3..];
        if let Some(at) = rest.rfind('@') {
            let userinfo = &rest[..at];
            secrets.push(userinfo.split_once(':').map_or(userinfo, |(_, pass)| pass));
        }
        if let Some((_, query)) = value.split_once('?') {
            secrets.extend(
                query
                    .split(['&', '#'])
                    .filter_map(|pair| pair.split_once('='))
                    .filter(|(name, _)| is_secret_parameter(name))
                    .map(|(_, secret)| secret),
            );
        }
    } else {
        // Every word and every tail from a word on: an echo starting mid-value is cut whole.
        let word_starts = value.char_indices().filter(|&(at, ch)| {
            !ch.is_whitespace()
                && value[..at]
                    .chars()
                    .next_back()
                    .is_none_or(char::is_whitespace)
        });
        secrets.extend(word_starts.map(|(at, _)| &value[at..]));
        secrets.extend(value.split_whitespace());
    }
    secrets.retain(|secret| secret.len() >= MIN_SECRET_LEN);
    secrets
}

/// `text` without secrets (the rules are in the module documentation); borrowed when there was
/// nothing to cut.
pub fn redact<'a, S: AsRef<str>>(text: &'a str, known_secrets: &[S]) -> Cow<'a, str> {
    let mut text = Cow::Borrowed(text);
    if let Some(cut) = cut_known_secrets(&text, known_secrets) {
        text = Cow::Owned(cut);
    }
    if let Some(cut) = cut_userinfo(&text) {
        text = Cow::Owned(cut);
    }
    if let Some(cut) = cut_secret_parameters(&text) {
        text = Cow::Owned(cut);
    }
    text
}

/// Rule 1, in one pass so a marker never joins with the text around it into a secret; the
/// longest secret starting at a position wins.
fn cut_known_secrets<S: AsRef<str>>(text: &str, known_secrets: &[S]) -> Option<String> {
    let mut secrets: Vec<&str> = known_secrets
        .iter()
        .map(AsRef::as_ref)
        .filter(|secret| secret.len() >= MIN_SECRET_LEN && text.contains(*secret))
        .collect();
    if secrets.is_empty() {
        return None;
    }
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    let mut cut = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(ch) = rest.chars().next() {
        match secrets.iter().find(|secret| rest.starts_with(**secret)) {
            Some(secret) => {
                cut.push_str(REDACTED);
                rest = &rest[secret.len()..];
            }
            None => {
                cut.push(ch);
                rest = &rest[ch.len_utf8()..];
            }
        }
    }
    Some(cut)
}

/// Whether `ch` ends a word (a URL in a log line ends there).
fn ends_word(ch: char) -> bool {
    ch.is_whitespace() || matches!(ch, '"' | '\'' | '`' | '<' | '>')
}

/// Rule 2.
fn cut_userinfo(text: &str) -> Option<String> {
    let mut cut: Option<String> = None;
    let mut copied = 0;
    let mut search = 0;
    while let Some(found) = text[search..].find("://") {
        let start = search + found + 3;
        let end = text[start..]
            .find(ends_word)
            .map_or(text.len(), |len| start + len);
        search = end.max(start);
        let Some(at) = text[start..end].rfind('@') else {
            continue;
        };
        if at == 0 || &text[start..start + at] == REDACTED {
            continue;
        }
        let out = cut.get_or_insert_with(|| String::with_capacity(text.len()));
        out.push_str(&text[copied..start]);
        out.push_str(REDACTED);
        copied = start + at;
    }
    cut.map(|mut out| {
        out.push_str(&text[copied..]);
        out
    })
}

/// Whether `ch` may be part of a parameter or configuration key name.
fn in_name(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.')
}

/// Whether `ch` ends a parameter value.
fn ends_value(ch: char) -> bool {
    ends_word(ch) || matches!(ch, '&' | '#' | ',' | ';' | ')' | ']' | '}')
}

/// Rule 3.
fn cut_secret_parameters(text: &str) -> Option<String> {
    let mut cut: Option<String> = None;
    let mut copied = 0;
    for (equals, _) in text.match_indices('=') {
        if equals < copied {
            continue;
        }
        let before = text[..equals].trim_end_matches(' ');
        let name_start = before
            .char_indices()
            .rev()
            .take_while(|(_, ch)| in_name(*ch))
            .last()
            .map_or(before.len(), |(at, _)| at);
        let name = &before[name_start..];
        if name.is_empty() || !(is_sensitive_key(name) || is_secret_parameter(name)) {
            continue;
        }
        let after = &text[equals + 1..];
        let value_start = equals + 1 + (after.len() - after.trim_start_matches(' ').len());
        let value_end = text[value_start..]
            .find(ends_value)
            .map_or(text.len(), |len| value_start + len);
        // A marker's own `]` ends a value: one already cut is left as it is.
        if value_end == value_start || text[value_start..].starts_with(REDACTED) {
            continue;
        }
        let out = cut.get_or_insert_with(|| String::with_capacity(text.len()));
        out.push_str(&text[copied..value_start]);
        out.push_str(REDACTED);
        copied = value_end;
    }
    cut.map(|mut out| {
        out.push_str(&text[copied..]);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NONE: &[&str] = &[];

    #[test]
    fn secret_names_are_sensitive_in_any_case() {
        for key in [
            "sasl.password",
            "SSL.Key.Password",
            "sasl.passwrd",
            "ssl.keystore.password",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.token.endpoint.url",
            "ssl.key.pem",
            "sasl.oauthbearer.config",
        ] {
            assert!(is_sensitive_key(key), "{key}");
        }
        for key in ["bootstrap.servers", "sasl.username", "enable.idempotence"] {
            assert!(!is_sensitive_key(key), "{key}");
        }
    }

    #[test]
    fn url_credentials_and_secret_parameters_are_cut_and_the_host_kept() {
        let line = "OIDC token request to \
                    https://user:hunter2secret@127.0.0.1:1/token?client_secret=s3cr3tvalue&scope=kafka \
                    failed: Couldn't connect to server";
        let shown = redact(line, NONE);
        assert_eq!(
            shown,
            "OIDC token request to https://[redacted]@127.0.0.1:1/token?client_secret=[redacted]\
             &scope=kafka failed: Couldn't connect to server"
        );
    }

    #[test]
    fn a_password_with_a_slash_or_an_at_sign_is_cut_whole() {
        let shown = redact("\"https://u:pa/ss@w@host:8443/t\": refused", NONE);
        assert_eq!(shown, "\"https://[redacted]@host:8443/t\": refused");
    }

    #[test]
    fn secret_parameter_names_in_any_case_and_configuration_keys() {
        for (line, expected) in [
            ("x?Client_Secret=abc&b=1", "x?Client_Secret=[redacted]&b=1"),
            ("a?access_token=t0k;", "a?access_token=[redacted];"),
            ("client_assertion=eyJ.x.y", "client_assertion=[redacted]"),
            ("&api_key=k&pwd=p", "&api_key=[redacted]&pwd=[redacted]"),
            ("sig=zz#frag", "sig=[redacted]#frag"),
            (
                "sasl.password = hunter2 next",
                "sasl.password = [redacted] next",
            ),
            ("(ssl.key.password=abc)", "(ssl.key.password=[redacted])"),
        ] {
            assert_eq!(redact(line, NONE), expected, "{line}");
        }
    }

    #[test]
    fn text_without_secrets_is_borrowed_unchanged() {
        for line in [
            "connect to ipv4#127.0.0.1:1 failed: Connection refused",
            "https://example.com/token?scope=kafka&grant_type=client_credentials",
            "sasl.oauthbearer.method=oidc, sasl.username=alice, a == b, =x",
            "mailto user@example.com",
            "https://[redacted]@host?client_secret=[redacted]",
        ] {
            assert!(matches!(redact(line, NONE), Cow::Borrowed(_)), "{line}");
        }
    }

    #[test]
    fn known_values_are_cut_wherever_they_appear_longest_first() {
        let known = ["hunter2", "hunter2secret", "abc"];
        assert_eq!(
            redact("got hunter2secret and hunter2, not abc", &known),
            "got [redacted] and [redacted], not abc"
        );
    }

    #[test]
    fn secrets_of_a_value_depend_on_its_key_and_form() {
        assert!(secrets_in_value("sasl.username", "alice-long").is_empty());
        assert_eq!(
            secrets_in_value("sasl.oauthbearer.config", "principal=admin bogus=s3cr3t x"),
            [
                "principal=admin bogus=s3cr3t x",
                "bogus=s3cr3t x",
                "principal=admin",
                "bogus=s3cr3t"
            ]
        );
        assert_eq!(
            secrets_in_value(
                "sasl.oauthbearer.token.endpoint.url",
                "https://user:hunter2secret@h:1/token?client_secret=s3cr3tvalue&scope=kafka"
            ),
            ["hunter2secret", "s3cr3tvalue"]
        );
        assert!(secrets_in_value("sasl.oauthbearer.token.endpoint.url", "https://h/t").is_empty());
        assert!(secrets_in_value("ssl.key.password", "abc").is_empty());
    }

    /// Where the text had a marker, a character no generated secret contains, so a secret
    /// cannot hide inside "[redacted]".
    fn without_markers(text: &str) -> String {
        text.replace(REDACTED, "\u{1}")
    }

    proptest! {
        #[test]
        fn no_secret_survives(
            user in "[a-z]{1,8}",
            password in "[A-Za-z0-9!$%*+/@:~]{4,16}",
            client_secret in "[A-Za-z0-9._~-]{4,16}",
            config_secret in "[A-Za-z0-9]{4,16}",
            param in prop::sample::select(vec![
                "client_secret", "CLIENT_SECRET", "password", "token", "access_token",
                "api_key", "client_assertion", "sasl.password",
            ]),
            prefix in "[ -~]{0,20}",
            suffix in "[ -~]{0,20}",
        ) {
            let url = format!(
                "https://{user}:{password}@127.0.0.1:1/token?scope=k&{param}={client_secret}"
            );
            let line = format!("{prefix} \"{url}\" {suffix} echo={config_secret} {url}");
            let known = secrets_in_value("sasl.password", &config_secret);
            let shown = without_markers(&redact(&line, &known));
            for secret in [&password, &client_secret, &config_secret] {
                prop_assert!(!shown.contains(secret.as_str()), "{secret} in {shown}");
            }
            prop_assert!(shown.contains("127.0.0.1:1/token"), "{shown}");
        }

        #[test]
        fn redacting_twice_changes_nothing_more(line in "[ -~]{0,80}") {
            let once = redact(&line, &["hunter2"]).into_owned();
            prop_assert_eq!(redact(&once, &["hunter2"]), once.as_str());
        }
    }
}
