//! The client ↔ agent exchange, decided purely: the request body, the HTTP request around it,
//! and what an HTTP response from the agent means for the process.
//!
//! The body is the CNI call itself, binary-safe without any escaping: every `CNI_*` variable
//! as `KEY=VALUE` followed by a NUL byte (environment strings cannot contain NUL), one more NUL,
//! then the config bytes exactly as read from stdin.

use std::fmt;

/// Endpoint of the node agent that answers IPAM calls.
pub const PATH: &str = "/ipam";
/// Endpoint of the node agent that answers the meta-plugin's calls from the static shim (the
/// same body and answers as [`PATH`]; the agent never declines one).
pub const CNI_CALL_PATH: &str = "/cni-call";
/// Media type of the body (see the module documentation).
pub const CONTENT_TYPE: &str = "application/vnd.weft.cni-call";
/// Status with which the agent declines a call it does not serve (its config names another
/// store): the client then runs the full plugin.
pub const STATUS_NOT_SERVED: u16 = 421;

/// Whether a variable belongs to the CNI call (the part of the environment that is sent).
pub fn is_cni_variable(key: &[u8]) -> bool {
    key.starts_with(b"CNI_")
}

/// The request body for a call with `env` (only its `CNI_*` variables are kept) and `stdin`.
pub fn encode_call<'a>(env: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, stdin: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(512 + stdin.len());
    for (key, value) in env {
        if is_cni_variable(key) && !key.contains(&0) && !key.contains(&b'=') && !value.contains(&0) {
            body.extend_from_slice(key);
            body.push(b'=');
            body.extend_from_slice(value);
            body.push(0);
        }
    }
    body.push(0);
    body.extend_from_slice(stdin);
    body
}

/// A decoded call: the CNI variables and the config bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<'a> {
    /// The `CNI_*` variables, in the order sent.
    pub env: Vec<(String, String)>,
    /// The config, as the runtime wrote it on the plugin's stdin.
    pub stdin: &'a [u8],
}

impl Call<'_> {
    /// A variable's value.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Why a body is not a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The list of variables has no terminating empty entry.
    Unterminated,
    /// An entry is not `KEY=VALUE` with a `CNI_` key.
    BadEntry(String),
    /// An entry is not UTF-8: the variable's name (lossily).
    NotUtf8(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unterminated => write!(f, "the variables of the call are not terminated"),
            Self::BadEntry(entry) => write!(f, "{entry:?} is not a CNI_KEY=VALUE variable"),
            Self::NotUtf8(name) => write!(f, "environment variable {name} is not valid UTF-8"),
        }
    }
}

impl std::error::Error for WireError {}

/// Decode a body made by [`encode_call`].
pub fn decode_call(body: &[u8]) -> Result<Call<'_>, WireError> {
    let mut env = Vec::new();
    let mut rest = body;
    loop {
        let end = rest.iter().position(|&b| b == 0).ok_or(WireError::Unterminated)?;
        let (entry, after) = (&rest[..end], &rest[end + 1..]);
        rest = after;
        if entry.is_empty() {
            return Ok(Call { env, stdin: rest });
        }
        let entry = std::str::from_utf8(entry).map_err(|_| {
            let name = entry.split(|&b| b == b'=').next().unwrap_or_default();
            WireError::NotUtf8(String::from_utf8_lossy(name).into_owned())
        })?;
        match entry.split_once('=') {
            Some((key, value)) if is_cni_variable(key.as_bytes()) => {
                env.push((key.to_string(), value.to_string()));
            }
            _ => return Err(WireError::BadEntry(entry.to_string())),
        }
    }
}

/// The HTTP/1.1 request carrying `body` to the agent (one request per connection).
pub fn http_request(body: &[u8]) -> Vec<u8> {
    crate::http::post_request(PATH, CONTENT_TYPE, body)
}

/// What the process does with the agent's response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The agent answered the call: print this on stdout and exit with this code.
    Print {
        /// The plugin's stdout: an ADD result, a VERSION reply, a CNI error, or nothing.
        stdout: Vec<u8>,
        /// 0 on success, 1 on a CNI error.
        exit_code: u8,
    },
    /// No answer to use (the agent declined, or answered something this client does not
    /// know): the full plugin does the call itself. Safe whatever the agent did, since every
    /// CNI verb is idempotent.
    Fallback(String),
}

/// Read the agent's complete HTTP response (the connection was closed after it):
/// `200` is a success to print, `400` with a JSON body a CNI error to print, anything else
/// (declined, an older agent, a truncated or unreadable response) a fallback.
pub fn read_answer(response: &[u8]) -> Answer {
    let response = match read_response(response) {
        Ok(response) => response,
        Err(why) => return Answer::Fallback(format!("{why} from the agent")),
    };
    let (status, body) = (response.status, response.body);
    match status {
        200 => Answer::Print {
            stdout: body,
            exit_code: 0,
        },
        400 if body.first() == Some(&b'{') => Answer::Print {
            stdout: body,
            exit_code: 1,
        },
        STATUS_NOT_SERVED => Answer::Fallback("the agent does not serve this config's store".into()),
        other => Answer::Fallback(format!("the agent answered HTTP {other}")),
    }
}

/// The agent's complete response, read: an error saying why it cannot be used (unreadable,
/// or a transfer encoding the agent never sends). Both clients read answers with it.
pub fn read_response(response: &[u8]) -> Result<crate::http::Response, String> {
    let response = crate::http::parse_response(response).map_err(|e| e.to_string())?;
    match &response.transfer_encoding {
        Some(encoding) => Err(format!("unexpected transfer-encoding {encoding}")),
        None => Ok(response),
    }
}

/// A CNI error object, for the few failures the client reports itself.
pub fn cni_error(code: u32, msg: &str, details: &str) -> Vec<u8> {
    format!(
        "{{\"cniVersion\":\"1.1.0\",\"code\":{code},\"msg\":{},\"details\":{}}}",
        json_string(msg),
        json_string(details)
    )
    .into_bytes()
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
