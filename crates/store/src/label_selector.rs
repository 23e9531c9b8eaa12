//! Label selectors in kubectl's `-l` syntax (set-based, as `k8s.io/apimachinery/pkg/labels`
//! parses them): `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, joined by
//! commas, all of which must hold.
//!
//! [`ListOptions`](crate::ListOptions) carries only equality requirements (every backend can
//! narrow by those); callers list with [`LabelSelector::equalities`] and then filter with
//! [`LabelSelector::matches`].

use std::collections::BTreeMap;

/// A selector that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The selector's syntax is wrong at some position.
    #[error("unable to parse requirement: {message} in {selector:?}")]
    Syntax {
        /// The whole selector as given.
        selector: String,
        /// What was expected.
        message: String,
    },
    /// A key or value with characters a label cannot have.
    #[error("invalid label {what} {text:?} in {selector:?}: {reason}")]
    Invalid {
        /// `key` or `value`.
        what: &'static str,
        /// The offending text.
        text: String,
        /// The whole selector.
        selector: String,
        /// Why.
        reason: &'static str,
    },
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` / `key==value`: the label exists with this value.
    Equals(String, String),
    /// `key!=value`: the label is absent or has another value.
    NotEquals(String, String),
    /// `key in (a,b)`: the label exists with one of the values.
    In(String, Vec<String>),
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn(String, Vec<String>),
    /// `key`: the label exists.
    Exists(String),
    /// `!key`: the label is absent.
    NotExists(String),
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Equals(k, v) => labels.get(k) == Some(v),
            Self::NotEquals(k, v) => labels.get(k) != Some(v),
            Self::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Self::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
            Self::Exists(k) => labels.contains_key(k),
            Self::NotExists(k) => !labels.contains_key(k),
        }
    }
}

/// A parsed selector: every requirement must hold (empty: everything matches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

impl LabelSelector {
    /// Parse kubectl's selector syntax (whitespace around tokens is ignored).
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser {
            text,
            chars: text.char_indices().collect(),
            at: 0,
        };
        let mut requirements = Vec::new();
        parser.skip_space();
        if parser.at_end() {
            return Ok(Self(requirements));
        }
        loop {
            requirements.push(parser.requirement()?);
            parser.skip_space();
            if parser.at_end() {
                break;
            }
            parser.expect(',')?;
        }
        Ok(Self(requirements))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }

    /// The equality requirements, for [`ListOptions::labels`](crate::ListOptions): a list
    /// narrowed by them and then filtered by [`Self::matches`] is the selector's result.
    pub fn equalities(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .filter_map(|r| match r {
                Requirement::Equals(k, v) => Some((k.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }
}

struct Parser<'a> {
    text: &'a str,
    chars: Vec<(usize, char)>,
    at: usize,
}

/// Characters that end a key or a value.
fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | '=' | '!' | '(' | ')')
}

impl Parser<'_> {
    fn at_end(&self) -> bool {
        self.at >= self.chars.len()
    }
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).map(|&(_, c)| c)
    }
    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }
    fn error(&self, message: impl Into<String>) -> SelectorError {
        SelectorError::Syntax {
            selector: self.text.into(),
            message: message.into(),
        }
    }
    fn expect(&mut self, wanted: char) -> Result<(), SelectorError> {
        self.skip_space();
        match self.peek() {
            Some(c) if c == wanted => {
                self.at += 1;
                Ok(())
            }
            Some(c) => Err(self.error(format!("found '{c}', expected: '{wanted}'"))),
            None => Err(self.error(format!("found end of input, expected: '{wanted}'"))),
        }
    }
    /// A run of non-delimiter characters (possibly empty).
    fn word(&mut self) -> String {
        self.skip_space();
        let start = self.at;
        while self.peek().is_some_and(|c| !is_delimiter(c)) {
            self.at += 1;
        }
        self.chars[start..self.at].iter().map(|&(_, c)| c).collect()
    }
    fn key(&mut self) -> Result<String, SelectorError> {
        let key = self.word();
        if key.is_empty() {
            return Err(self.error("expected a label key"));
        }
        check_key(&key, self.text)?;
        Ok(key)
    }
    fn value(&mut self) -> Result<String, SelectorError> {
        let value = self.word();
        check_value(&value, self.text)?;
        Ok(value)
    }
    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        self.skip_space();
        if self.peek() == Some('!') {
            self.at += 1;
            return Ok(Requirement::NotExists(self.key()?));
        }
        let key = self.key()?;
        self.skip_space();
        match self.peek() {
            None | Some(',') => Ok(Requirement::Exists(key)),
            Some('=') => {
                self.at += 1;
                if self.peek() == Some('=') {
                    self.at += 1;
                }
                Ok(Requirement::Equals(key, self.value()?))
            }
            Some('!') => {
                self.at += 1;
                if self.peek() != Some('=') {
                    return Err(self.error(format!("expected '=' after '!' following {key:?}")));
                }
                self.at += 1;
                Ok(Requirement::NotEquals(key, self.value()?))
            }
            Some(_) => {
                let operator = self.word();
                let values = match operator.as_str() {
                    "in" | "notin" => self.set()?,
                    "" => return Err(self.error(format!("unexpected character after {key:?}"))),
                    other => {
                        return Err(self.error(format!(
                            "found {other:?}, expected: in, notin, =, ==, !=, ',' or end of input"
                        )));
                    }
                };
                Ok(if operator == "in" {
                    Requirement::In(key, values)
                } else {
                    Requirement::NotIn(key, values)
                })
            }
        }
    }
    /// `( v1, v2 )`, at least one value (kubectl refuses an empty set).
    fn set(&mut self) -> Result<Vec<String>, SelectorError> {
        self.expect('(')?;
        let mut values = Vec::new();
        loop {
            values.push(self.value()?);
            self.skip_space();
            match self.peek() {
                Some(',') => self.at += 1,
                Some(')') => {
                    self.at += 1;
                    break;
                }
                Some(c) => return Err(self.error(format!("found '{c}', expected: ',' or ')'"))),
                None => return Err(self.error("found end of input, expected: ')'")),
            }
        }
        if values.iter().all(String::is_empty) {
            return Err(self.error("for 'in', 'notin' operators, values set can't be empty"));
        }
        Ok(values)
    }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of `[A-Za-z0-9._-]`, beginning and ending alphanumeric.
fn check_key(key: &str, selector: &str) -> Result<(), SelectorError> {
    let invalid = |reason| SelectorError::Invalid {
        what: "key",
        text: key.into(),
        selector: selector.into(),
        reason,
    };
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty()
                || prefix.len() > 253
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            {
                return Err(invalid("the prefix must be a lowercase DNS subdomain"));
            }
            name
        }
        None => key,
    };
    if !is_label_name(name) {
        return Err(invalid(
            "a name of at most 63 characters of alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric",
        ));
    }
    Ok(())
}

/// A label value: empty, or as a key's name part.
fn check_value(value: &str, selector: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(SelectorError::Invalid {
            what: "value",
            text: value.into(),
            selector: selector.into(),
            reason: "at most 63 characters of alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric",
        })
    }
}

fn is_label_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !name.is_empty()
        && name.len() <= 63
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Requirement::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_every_operator() {
        let s = LabelSelector::parse(
            "app=web, tier==front,env!=prod,zone in (a, b),kubevirt.io/size notin (big),ready,!broken",
        )
        .unwrap();
        assert_eq!(
            s.0,
            vec![
                Equals("app".into(), "web".into()),
                Equals("tier".into(), "front".into()),
                NotEquals("env".into(), "prod".into()),
                In("zone".into(), vec!["a".into(), "b".into()]),
                NotIn("kubevirt.io/size".into(), vec!["big".into()]),
                Exists("ready".into()),
                NotExists("broken".into()),
            ]
        );
        assert_eq!(
            s.equalities(),
            vec![("app".into(), "web".into()), ("tier".into(), "front".into())]
        );
        assert_eq!(LabelSelector::parse("  ").unwrap(), LabelSelector::default());
        assert_eq!(
            LabelSelector::parse("a=").unwrap().0,
            vec![Equals("a".into(), "".into())]
        );
    }

    #[test]
    fn matches_as_kubernetes_does() {
        let l = labels(&[("app", "web"), ("zone", "a")]);
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&l);
        assert!(m("app=web"));
        assert!(!m("app=db"));
        assert!(m("app!=db"));
        assert!(m("missing!=x"), "!= matches an absent label");
        assert!(m("zone in (a,b)"));
        assert!(!m("zone in (b)"));
        assert!(!m("missing in (a)"));
        assert!(m("zone notin (b)"));
        assert!(m("missing notin (a)"), "notin matches an absent label");
        assert!(!m("zone notin (a)"));
        assert!(m("app") && !m("missing"));
        assert!(m("!missing") && !m("!app"));
        assert!(m("app=web,zone=a") && !m("app=web,zone=b"));
        assert!(m(""));
    }

    #[test]
    fn refuses_what_kubectl_refuses() {
        for bad in [
            "app=web,",
            ",app",
            "app in a",
            "app in ()",
            "app in (a",
            "app between (a)",
            "app=we b",
            "!",
            "app!x",
            "-bad=1",
            "app=bad!",
            "Upper/x=1",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} should not parse");
        }
        let err = LabelSelector::parse("app in a").unwrap_err().to_string();
        assert!(err.contains("expected: '('"), "{err}");
    }
}
