//! `tools.json` `mcpServers`: one checked rule per key of a server object.

use std::time::Duration;

use indexmap::IndexMap;
use serde::de::{self, MapAccess, SeqAccess, Unexpected};

use crate::label::{Confidentiality, Label};
use crate::mcp::{McpServerConfig, McpTransport, check_server_id};
use crate::strict::{Check, NamesRule, Rule, Site, SpecErrorKind, key_check};
use crate::tool::ToolCapabilities;

const SERVER_KEYS: &[&str] = &[
    "transport",
    "command",
    "args",
    "env",
    "url",
    "headers",
    "timeout_seconds",
    "enable_tools",
    "capabilities",
];

const CAPABILITY_KEYS: &[&str] = &[
    "result",
    "changes_state",
    "external",
    "ceiling",
    "quarantined",
];

// ---------------------------------------------------------------------------------------------
// tools.json `mcpServers`
// ---------------------------------------------------------------------------------------------

pub(crate) type EnvLookup<'e> = &'e dyn Fn(&str) -> Option<String>;

/// Replaces every `${NAME}` in `text` with the variable's value.
pub(crate) fn substitute(
    text: &str,
    env: EnvLookup<'_>,
) -> Result<String, (SpecErrorKind, String)> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err((
                SpecErrorKind::InvalidValue,
                format!("unterminated `${{` in {text:?}"),
            ));
        };
        let name = &after[..end];
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err((
                SpecErrorKind::InvalidValue,
                format!(
                    "invalid variable reference `${{{name}}}`: use `${{NAME}}` with NAME from [A-Za-z_][A-Za-z0-9_]*"
                ),
            ));
        }
        match env(name) {
            Some(value) => out.push_str(&value),
            None => {
                return Err((
                    SpecErrorKind::MissingEnvVar,
                    format!("environment variable `{name}` is not set"),
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A string with `${VAR}` substituted; with `required`, non-empty after trimming.
pub(crate) struct EnvText<'e> {
    env: EnvLookup<'e>,
    required: bool,
}

impl Rule for EnvText<'_> {
    type Out = String;

    fn expected(&self) -> &'static str {
        if self.required {
            "a non-empty string"
        } else {
            "a string"
        }
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        let value = substitute(v, self.env)
            .map_err(|(kind, message)| at.ctx.fail::<E>(kind, at.key, message))?;
        if self.required && value.trim().is_empty() {
            return Err(at.invalid("must not be empty".to_owned()));
        }
        Ok(value)
    }
}

/// An array of strings with `${VAR}` substituted.
pub(crate) struct EnvTexts<'e>(EnvLookup<'e>);

impl Rule for EnvTexts<'_> {
    type Out = Vec<String>;

    fn expected(&self) -> &'static str {
        "an array of strings"
    }

    fn seq<'de, A: SeqAccess<'de>>(
        self,
        at: Site<'_>,
        mut seq: A,
    ) -> Result<Vec<String>, A::Error> {
        let mut out = Vec::new();
        let rule = || EnvText {
            env: self.0,
            required: false,
        };
        while let Some(v) = seq.next_element_seed(Check::new(at, rule()))? {
            out.push(v);
        }
        Ok(out)
    }
}

/// An object of non-empty names to strings (with `${VAR}` substituted in the values).
pub(crate) struct EnvMap<'e>(EnvLookup<'e>);

/// A name in an [`EnvMap`].
pub(crate) struct MapName;

impl Rule for MapName {
    type Out = String;

    fn expected(&self) -> &'static str {
        "a name"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        if v.trim().is_empty() {
            return Err(at.invalid("names must not be empty".to_owned()));
        }
        Ok(v.to_owned())
    }
}

impl Rule for EnvMap<'_> {
    type Out = Vec<(String, String)>;

    fn expected(&self) -> &'static str {
        "an object of names to strings"
    }

    fn map<'de, A: MapAccess<'de>>(
        self,
        at: Site<'_>,
        mut map: A,
    ) -> Result<Vec<(String, String)>, A::Error> {
        let mut out: Vec<(String, String)> = Vec::new();
        while let Some(name) = map.next_key_seed(Check::new(at, MapName))? {
            if out.iter().any(|(n, _)| *n == name) {
                return Err(at.invalid(format!("duplicate name `{name}`")));
            }
            let path = at.key.map(|k| format!("{k}.{name}"));
            let value_at = Site {
                ctx: at.ctx,
                key: path.as_deref().or(at.key),
            };
            let value = map.next_value_seed(Check::new(
                value_at,
                EnvText {
                    env: self.0,
                    required: false,
                },
            ))?;
            out.push((name, value));
        }
        Ok(out)
    }
}

/// `transport`: `"stdio"` or `"http"`.
pub(crate) struct TransportKind;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Stdio,
    Http,
}

impl Rule for TransportKind {
    type Out = Kind;

    fn expected(&self) -> &'static str {
        "\"stdio\" or \"http\""
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<Kind, E> {
        match v {
            "stdio" => Ok(Kind::Stdio),
            "http" => Ok(Kind::Http),
            "streamableHttp" | "streamable_http" | "streamable-http" => Err(at.invalid(format!(
                "expected \"stdio\" or \"http\", found {v:?}; did you mean \"http\"?"
            ))),
            "sse" => Err(at.invalid(
                "the legacy SSE transport is not supported; use \"http\" (streamable HTTP)"
                    .to_owned(),
            )),
            _ => Err(at.reject(self.expected(), Unexpected::Str(v))),
        }
    }
}

/// `timeout_seconds`: a number in (0, 86400].
pub(crate) struct Seconds;

impl Rule for Seconds {
    type Out = Duration;

    fn expected(&self) -> &'static str {
        "a number of seconds greater than 0 and at most 86400"
    }

    fn int<E: de::Error>(self, at: Site<'_>, v: i128) -> Result<Duration, E> {
        self.float(at, v as f64)
    }

    fn float<E: de::Error>(self, at: Site<'_>, v: f64) -> Result<Duration, E> {
        if v > 0.0 && v <= 86_400.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(at.invalid(format!("expected {}, found {v}", self.expected())))
        }
    }
}

/// `enable_tools`: a non-empty array of tool names.
pub(crate) struct EnabledTools;

impl Rule for EnabledTools {
    type Out = Vec<String>;

    fn expected(&self) -> &'static str {
        "a non-empty array of tool names"
    }

    fn seq<'de, A: SeqAccess<'de>>(self, at: Site<'_>, seq: A) -> Result<Vec<String>, A::Error> {
        let names = NamesRule { comma: false }.seq(at, seq)?;
        if names.is_empty() {
            return Err(at.invalid(
                "must list at least one tool; omit the key to enable every tool".to_owned(),
            ));
        }
        Ok(names)
    }
}

/// `mcpServers`: an object of server ids to server objects.
pub(crate) struct Servers<'e>(pub(crate) EnvLookup<'e>);

/// A server id (a key of `mcpServers`).
pub(crate) struct ServerId;

impl Rule for ServerId {
    type Out = String;

    fn expected(&self) -> &'static str {
        "a server id"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<String, E> {
        check_server_id(v).map_err(|message| at.invalid::<E>(message))?;
        Ok(v.to_owned())
    }
}

impl Rule for Servers<'_> {
    type Out = IndexMap<String, McpServerConfig>;

    fn expected(&self) -> &'static str {
        "an object of MCP server ids to server objects"
    }

    fn map<'de, A: MapAccess<'de>>(
        self,
        at: Site<'_>,
        mut map: A,
    ) -> Result<IndexMap<String, McpServerConfig>, A::Error> {
        let mut servers = IndexMap::new();
        while let Some(id) = map.next_key_seed(Check::new(at, ServerId))? {
            let path = format!("mcpServers.{id}");
            if servers.contains_key(&id) {
                return Err(Site::key(at.ctx, &path).invalid("duplicate server id".to_owned()));
            }
            let server =
                map.next_value_seed(Check::new(Site::key(at.ctx, &path), Server(self.0)))?;
            servers.insert(id, server);
        }
        Ok(servers)
    }
}

/// One server object.
pub(crate) struct Server<'e>(EnvLookup<'e>);

impl Rule for Server<'_> {
    type Out = McpServerConfig;

    fn expected(&self) -> &'static str {
        "an MCP server object"
    }

    fn map<'de, A: MapAccess<'de>>(
        self,
        at: Site<'_>,
        mut map: A,
    ) -> Result<McpServerConfig, A::Error> {
        let ctx = at.ctx;
        let base = at.key.unwrap_or("mcpServers");
        let env = self.0;
        let mut seen = Vec::new();
        let (mut kind, mut command, mut args, mut vars) = (None, None, None, None);
        let (mut url, mut headers, mut timeout, mut enable) = (None, None, None, None);
        let mut caps = None;
        while let Some(key) = map.next_key_seed(key_check(ctx, SERVER_KEYS, &seen))? {
            seen.push(key);
            let path = format!("{base}.{key}");
            let site = Site::key(ctx, &path);
            let text = |required| EnvText { env, required };
            match key {
                "transport" => kind = Some(map.next_value_seed(Check::new(site, TransportKind))?),
                "command" => command = Some(map.next_value_seed(Check::new(site, text(true)))?),
                "args" => args = Some(map.next_value_seed(Check::new(site, EnvTexts(env)))?),
                "env" => vars = Some(map.next_value_seed(Check::new(site, EnvMap(env)))?),
                "url" => url = Some(map.next_value_seed(Check::new(site, text(true)))?),
                "headers" => headers = Some(map.next_value_seed(Check::new(site, EnvMap(env)))?),
                "timeout_seconds" => {
                    timeout = Some(map.next_value_seed(Check::new(site, Seconds))?)
                }
                "enable_tools" => {
                    enable = Some(map.next_value_seed(Check::new(site, EnabledTools))?)
                }
                _ => caps = Some(map.next_value_seed(Check::new(site, Capabilities))?),
            }
        }
        let kind = match (kind, command.is_some(), url.is_some()) {
            (Some(kind), _, _) => kind,
            (None, true, false) => Kind::Stdio,
            (None, false, true) => Kind::Http,
            (None, _, _) => {
                return Err(at.invalid(
                    "set `transport` to \"stdio\" (with `command`) or \"http\" (with `url`)"
                        .to_owned(),
                ));
            }
        };
        let misplaced = match kind {
            Kind::Stdio => [("url", url.is_some()), ("headers", headers.is_some())],
            Kind::Http => [("command", command.is_some()), ("args", args.is_some())],
        };
        if let Some((key, _)) = misplaced.iter().find(|(_, set)| *set) {
            let path = format!("{base}.{key}");
            return Err(
                Site::key(ctx, &path).invalid("not allowed with this `transport`".to_owned())
            );
        }
        if kind == Kind::Http && vars.is_some() {
            let path = format!("{base}.env");
            return Err(Site::key(ctx, &path)
                .invalid("not allowed with `transport` \"http\"; use `headers`".to_owned()));
        }
        let transport = match kind {
            Kind::Stdio => McpTransport::Stdio {
                command: command.ok_or_else(|| {
                    let path = format!("{base}.command");
                    ctx.fail::<A::Error>(
                        SpecErrorKind::MissingKey,
                        Some(&path),
                        "required for `transport` \"stdio\"".to_owned(),
                    )
                })?,
                args: args.unwrap_or_default(),
                env: vars.unwrap_or_default(),
            },
            Kind::Http => {
                let url = url.ok_or_else(|| {
                    let path = format!("{base}.url");
                    ctx.fail::<A::Error>(
                        SpecErrorKind::MissingKey,
                        Some(&path),
                        "required for `transport` \"http\"".to_owned(),
                    )
                })?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    let path = format!("{base}.url");
                    return Err(Site::key(ctx, &path).invalid(format!(
                        "expected an http:// or https:// URL, found {url:?}"
                    )));
                }
                McpTransport::Http {
                    url,
                    headers: headers.unwrap_or_default(),
                }
            }
        };
        let mut config = McpServerConfig::with_transport(transport);
        if let Some(t) = timeout {
            config = config.timeout(t).connect_timeout(t);
        }
        if let Some(names) = enable {
            config = config.enable_tools(names);
        }
        if let Some(caps) = caps {
            config = config.capabilities(caps);
        }
        Ok(config)
    }
}

/// `capabilities`: what every tool of the server declares for information-flow control
/// (keys as [`ToolCapabilities`]'s fields; absent keys keep what an MCP tool is by
/// default, [`ToolCapabilities::remote`]).
pub(crate) struct Capabilities;

impl Rule for Capabilities {
    type Out = ToolCapabilities;

    fn expected(&self) -> &'static str {
        "an object with `result`, `changes_state`, `external`, `ceiling` or `quarantined`"
    }

    fn map<'de, A: MapAccess<'de>>(
        self,
        at: Site<'_>,
        mut map: A,
    ) -> Result<ToolCapabilities, A::Error> {
        let ctx = at.ctx;
        let base = at.key.unwrap_or("capabilities");
        let mut caps = ToolCapabilities::remote();
        let mut seen = Vec::new();
        while let Some(key) = map.next_key_seed(key_check(ctx, CAPABILITY_KEYS, &seen))? {
            seen.push(key);
            let path = format!("{base}.{key}");
            let site = Site::key(ctx, &path);
            match key {
                "result" => caps.result = map.next_value_seed(Check::new(site, LabelRule))?,
                "changes_state" => {
                    caps.changes_state = Some(map.next_value_seed(Check::new(site, Flag))?)
                }
                "external" => caps.external = map.next_value_seed(Check::new(site, Flag))?,
                "ceiling" => caps.ceiling = map.next_value_seed(Check::new(site, Ceiling))?,
                _ => caps.quarantined = map.next_value_seed(Check::new(site, Flag))?,
            }
        }
        Ok(caps)
    }
}

/// `true` or `false`.
pub(crate) struct Flag;

impl Rule for Flag {
    type Out = bool;

    fn expected(&self) -> &'static str {
        "true or false"
    }

    fn bool<E: de::Error>(self, _at: Site<'_>, v: bool) -> Result<bool, E> {
        Ok(v)
    }
}

/// A label such as `"untrusted/private"` (see [`Label`]'s `FromStr`).
pub(crate) struct LabelRule;

impl Rule for LabelRule {
    type Out = Label;

    fn expected(&self) -> &'static str {
        "a label: `trusted` or `untrusted`, and/or `public`, `private` or `secret` (e.g. \"untrusted/private\")"
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<Label, E> {
        v.parse()
            .map_err(|_| at.reject(self.expected(), Unexpected::Str(v)))
    }
}

/// `"public"`, `"private"` or `"secret"`.
pub(crate) struct Ceiling;

impl Rule for Ceiling {
    type Out = Confidentiality;

    fn expected(&self) -> &'static str {
        "\"public\", \"private\" or \"secret\""
    }

    fn str<E: de::Error>(self, at: Site<'_>, v: &str) -> Result<Confidentiality, E> {
        v.parse()
            .map_err(|_| at.reject(self.expected(), Unexpected::Str(v)))
    }
}
