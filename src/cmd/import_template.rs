//! `netpoller import-template`: a Zabbix template export (YAML or JSON) as netpoller
//! `[[templates]]`, so a network team keeps the items, intervals and preprocessing it
//! already has in Zabbix.
//!
//! What is imported: ICMP simple checks (`icmpping`, `icmppingloss`, `icmppingsec`,
//! `icmppingretry`)
//! and SNMP agent items with a numeric OID, with their interval (the first part of a
//! flexible one) and preprocessing steps; template macros (`{$NAME}`, with context too)
//! are resolved from the template's own values. Everything else is listed with the
//! reason, as a comment in the output and on stderr: other item types (Zabbix agent,
//! calculated, ...), symbolic OIDs, `walk[]` items nothing imported reads, macros without a value,
//! steps netpoller does not run (JavaScript, JSONPath, ...), discovery macros other
//! than `{#SNMPINDEX}`, disabled items. A discovery rule becomes a template of its
//! item prototypes, items per table row, with a netpoller discovery rule that walks
//! each host's rows ([`discovery_rule`]: the first column of Zabbix's `discovery[]` key
//! or `SNMP_WALK_TO_JSON` step, the filter conditions one condition per column can
//! say, the others listed); a rule netpoller cannot walk leaves the rows to each host
//! (`indices`). Zabbix 6.4+ templates walk each table once
//! (`walk[OID,...]`) and give every dependent item (prototype) its row with a first
//! step `SNMP_WALK_VALUE`: such an item becomes an SNMP item of the row's OID at the
//! walk's interval (the same value, read by a GET in the host's batched requests), and
//! the walk item itself is not polled. Templates a template
//! links in Zabbix are named in a comment: netpoller's templates do not link, so a host
//! lists each.
//!
//! Invariant: every item written loads: each is checked by the config loader itself
//! (a one-item template) before it is written, and one that does not load is listed
//! with the loader's error instead.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Deserialize;

use crate::config::SNMPINDEX;
use poller::keys::{ItemKey, Param};

mod discovery;
use discovery::discovery_rule;

/// Arguments of `netpoller import-template`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Zabbix template export in YAML or JSON (Zabbix 6.0 or later: Data collection
    /// → Templates → select → Export; the templates in Zabbix's git are YAML too).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Import only this template (its technical name, `template` in the export);
    /// repeat for several. Default: every template in the file.
    #[arg(long = "template", value_name = "NAME")]
    pub only: Vec<String>,
}

#[derive(Deserialize)]
struct Export {
    zabbix_export: ZabbixExport,
}

#[derive(Deserialize)]
struct ZabbixExport {
    #[serde(default)]
    version: String,
    #[serde(default)]
    templates: Vec<Template>,
}

#[derive(Deserialize)]
struct Template {
    template: String,
    #[serde(default)]
    items: Vec<Item>,
    #[serde(default)]
    discovery_rules: Vec<Rule>,
    #[serde(default)]
    macros: Vec<Macro>,
    /// Templates Zabbix links to this one (their items are the host's too).
    #[serde(default)]
    templates: Vec<Linked>,
}

/// A discovery rule: its item prototypes are what netpoller takes.
#[derive(Deserialize)]
struct Rule {
    name: String,
    key: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    item_prototypes: Vec<Item>,
    /// What finds the rows: `SNMP_AGENT` (`snmp_oid = discovery[...]`) or, from
    /// Zabbix 6.4, `DEPENDENT` on a `walk[]` item with an `SNMP_WALK_TO_JSON` step.
    #[serde(rename = "type", default = "zabbix_passive")]
    kind: String,
    #[serde(default)]
    snmp_oid: Option<String>,
    #[serde(default)]
    delay: Option<String>,
    #[serde(default)]
    master_item: Option<MasterRef>,
    #[serde(default)]
    preprocessing: Vec<Step>,
    #[serde(default)]
    filter: Option<Filter>,
    /// Zabbix's LLD overrides: what changes for the rows each one's filter takes.
    #[serde(default)]
    overrides: Vec<Override>,
}

/// An LLD override: operations on the prototypes of the rows its filter takes.
#[derive(Deserialize)]
struct Override {
    name: String,
    #[serde(default)]
    operations: Vec<OverrideOperation>,
}

#[derive(Deserialize)]
struct OverrideOperation {
    /// `ITEM_PROTOTYPE` (the default, left out of exports), `TRIGGER_PROTOTYPE`,
    /// `GRAPH_PROTOTYPE`, `HOST_PROTOTYPE`.
    #[serde(default)]
    operationobject: Option<String>,
}

impl Override {
    /// Whether it changes item prototypes (which rows have an item, its status or
    /// interval), what netpoller polls.
    fn on_items(&self) -> bool {
        self.operations.iter().any(|o| {
            o.operationobject
                .as_deref()
                .is_none_or(|k| k == "ITEM_PROTOTYPE")
        })
    }
}

/// A discovery rule's filter: `AND_OR` (the default: conditions on the same macro
/// "or", on different macros "and"), `AND`, `OR` or `FORMULA`.
#[derive(Deserialize)]
struct Filter {
    #[serde(default)]
    evaltype: Option<String>,
    #[serde(default)]
    conditions: Vec<FilterCondition>,
}

#[derive(Deserialize)]
struct FilterCondition {
    #[serde(rename = "macro")]
    name: String,
    #[serde(default)]
    value: String,
    /// `MATCHES_REGEX` (the default), `NOT_MATCHES_REGEX`, `EXISTS`, `NOT_EXISTS`.
    #[serde(default)]
    operator: Option<String>,
}

#[derive(Deserialize)]
struct Linked {
    name: String,
}

#[derive(Deserialize)]
struct Macro {
    #[serde(rename = "macro")]
    name: String,
    #[serde(default)]
    value: String,
    /// `SECRET_TEXT` and `VAULT` macros do not export their values.
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

/// A template item as Zabbix exports it: defaults are left out of the export (type
/// `ZABBIX_PASSIVE`, value type `UNSIGNED`, delay `1m`, status enabled).
#[derive(Deserialize)]
struct Item {
    name: String,
    #[serde(rename = "type", default = "zabbix_passive")]
    kind: String,
    key: String,
    #[serde(default)]
    value_type: Option<String>,
    #[serde(default)]
    delay: Option<String>,
    #[serde(default)]
    snmp_oid: Option<String>,
    #[serde(default)]
    status: Option<String>,
    /// An item prototype Zabbix does not create (`NO_DISCOVER`).
    #[serde(default)]
    discover: Option<String>,
    #[serde(default)]
    preprocessing: Vec<Step>,
    /// A dependent item's master (an item of the same template).
    #[serde(default)]
    master_item: Option<MasterRef>,
}

#[derive(Deserialize)]
struct MasterRef {
    key: String,
}

fn zabbix_passive() -> String {
    "ZABBIX_PASSIVE".into()
}

#[derive(Deserialize)]
struct Step {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    parameters: Vec<String>,
    /// Zabbix 5.x: the parameters in one string, a newline between them.
    #[serde(default)]
    params: Option<String>,
    #[serde(default)]
    error_handler: Option<String>,
    #[serde(default)]
    error_handler_params: Option<String>,
}

impl Step {
    /// The step's parameters, as 6.0+ or 5.x writes them.
    fn params(&self) -> Vec<&str> {
        match (&self.parameters[..], &self.params) {
            ([], Some(p)) => p.split('\n').collect(),
            (ps, _) => ps.iter().map(String::as_str).collect(),
        }
    }
}

/// `s` as a TOML string (quoted and escaped).
fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A template's user macros: values by name and context (unquoted), `None` for a
/// secret one (its value is not exported); names that have regex contexts.
#[derive(Default)]
struct Macros {
    values: HashMap<(String, Option<String>), Option<String>>,
    regex: Vec<String>,
}

/// The name and the context of a macro's inside (`NAME`, `NAME:ctx`, `NAME:"ctx"`,
/// `NAME:regex:"..."`: the context `None` and `true`).
fn macro_parts(inside: &str) -> (String, Option<String>, bool) {
    match inside.split_once(':') {
        None => (inside.trim().to_owned(), None, false),
        Some((name, ctx)) => {
            let ctx = ctx.trim();
            let regex = ctx.starts_with("regex:");
            let ctx = ctx.strip_prefix("regex:").unwrap_or(ctx).trim();
            let ctx = match ctx.strip_prefix('"').and_then(|c| c.strip_suffix('"')) {
                Some(q) => q.replace("\\\"", "\""),
                None => ctx.to_owned(),
            };
            (name.trim().to_owned(), (!regex).then_some(ctx), regex)
        }
    }
}

impl Macros {
    fn new(list: &[Macro]) -> Macros {
        let mut m = Macros::default();
        for mac in list {
            let inside = mac
                .name
                .trim()
                .strip_prefix("{$")
                .and_then(|x| x.strip_suffix('}'))
                .unwrap_or_default();
            let (name, ctx, regex) = macro_parts(inside);
            if regex {
                m.regex.push(name);
                continue;
            }
            let secret = matches!(mac.kind.as_deref(), Some("SECRET_TEXT" | "VAULT"));
            m.values
                .insert((name, ctx), (!secret).then(|| mac.value.clone()));
        }
        m
    }

    /// The value of the macro inside `{$...}`, as Zabbix picks it: the context's own,
    /// else the plain one's. `Err`: why there is none to take.
    fn value(&self, inside: &str) -> Result<&str, String> {
        let (name, ctx, _) = macro_parts(inside);
        let whole = format!("{{${inside}}}");
        let found = ctx
            .clone()
            .and_then(|c| self.values.get(&(name.clone(), Some(c))))
            .or_else(|| {
                if ctx.is_some() && self.regex.contains(&name) {
                    None
                } else {
                    self.values.get(&(name.clone(), None))
                }
            });
        match found {
            Some(Some(v)) => Ok(v),
            Some(None) => Err(format!("macro {whole} is secret (Zabbix does not export its value)")),
            None if self.regex.contains(&name) => Err(format!(
                "macro {whole}: the template gives {{${name}}} regex contexts, which netpoller does not match"
            )),
            None => Err(format!("macro {whole} has no value in the template")),
        }
    }
}

/// `{$NAME}` and `{$NAME:"context"}` replaced by the template's values (a context
/// macro without its own value takes the plain one's, as in Zabbix). `Err`: the first
/// macro without a value.
fn resolve(text: &str, macros: &Macros) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{$") {
        // The macro ends at the first `}` outside a quoted context.
        let body = &rest[start + 2..];
        let mut quoted = false;
        let mut prev = ' ';
        let end = body.char_indices().find_map(|(i, c)| {
            match c {
                '"' if prev != '\\' => quoted = !quoted,
                '}' if !quoted => return Some(i),
                _ => {}
            }
            prev = c;
            None
        });
        let Some(end) = end else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str(macros.value(&body[..end])?);
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Zabbix's update interval as netpoller's: the first part of a flexible one
/// (`1m;50s/1-7,00:00-24:00`), seconds without a unit (`90`) as `90s`.
fn interval(delay: &str) -> Result<String, String> {
    let first = delay.split(';').next().unwrap_or_default().trim();
    let secs = first.bytes().all(|b| b.is_ascii_digit());
    match first {
        "" | "0" => Err(format!(
            "update interval {delay:?} only has custom intervals (netpoller polls on a fixed one)"
        )),
        f if secs => Ok(format!("{f}s")),
        f => Ok(f.to_owned()),
    }
}

/// The OID a dependent item's value comes from, and its master: Zabbix 6.4+ templates
/// walk a table once (`walk[OID,...]`, an SNMP item of the template) and give each
/// dependent item its row with a first step `SNMP_WALK_VALUE` (the row's OID, format 0:
/// the value as the agent gives it). Polling that OID is the same value (a GET of
/// it, in the host's batched requests) without the walk. `Err`: any other dependent
/// item, with why.
fn walk_value<'a>(
    it: &Item,
    macros: &Macros,
    masters: &HashMap<&str, &'a Item>,
) -> Result<(String, &'a Item), String> {
    let master_key = it.master_item.as_ref().map_or("", |m| m.key.as_str());
    let not = |why: &str| {
        Err(format!(
            "item type DEPENDENT (of {master_key:?}): {why}; netpoller imports dependent items of an SNMP walk[] item whose first step is SNMP_WALK_VALUE"
        ))
    };
    let Some(master) = masters.get(master_key) else {
        return not("its master is not an item of this template (an item prototype's master may be another prototype in Zabbix: not imported)");
    };
    let columns = match walk_columns(master, macros)? {
        Ok(c) => c,
        Err(why) => return not(&why),
    };
    if !master.preprocessing.is_empty() {
        return not("its master has preprocessing steps of its own");
    }
    let Some(first) = it
        .preprocessing
        .first()
        .filter(|s| s.kind == "SNMP_WALK_VALUE")
    else {
        return not("its first step is not SNMP_WALK_VALUE");
    };
    if first
        .error_handler
        .as_deref()
        .is_some_and(|h| h != "ORIGINAL_ERROR")
    {
        return not("its SNMP_WALK_VALUE step has an error handler");
    }
    let (oid, format) = match first.params()[..] {
        [oid, format] => (resolve(oid, macros)?, format.trim()),
        _ => return not("its SNMP_WALK_VALUE step does not have two parameters"),
    };
    if format != "0" {
        return not(&format!(
            "SNMP_WALK_VALUE format {format:?} (netpoller stores the value as the agent gives it: format 0)"
        ));
    }
    // Zabbix compares the row's OID as written, a leading dot optional.
    let oid = oid.strip_prefix('.').unwrap_or(&oid).to_owned();
    // The row must be in a column the master walks (or be the OID walked: Zabbix then
    // GETs it), as Zabbix finds it only there.
    let walked = columns.iter().any(|c| {
        !c.is_empty()
            && oid
                .strip_prefix(c)
                .is_some_and(|r| r.is_empty() || r.starts_with('.'))
    });
    if !walked {
        return not(&format!("{oid:?} is not under the OIDs its master walks"));
    }
    Ok((oid, master))
}

/// The OIDs an SNMP `walk[OID,...]` item walks (numeric, without a leading dot), or
/// why `master` is not one that netpoller can stand in for. The outer `Err` is a macro
/// without a value.
fn walk_columns(master: &Item, macros: &Macros) -> Result<Result<Vec<String>, String>, String> {
    let walk = resolve(master.snmp_oid.as_deref().unwrap_or_default(), macros)?;
    let walk = walk.trim();
    if master.kind != "SNMP_AGENT" || !walk.starts_with("walk[") {
        return Ok(Err("its master is not an SNMP walk[] item".into()));
    }
    let columns = match key_params(walk) {
        Ok(columns) => columns,
        Err(why) => return Ok(Err(format!("its master's {why}"))),
    };
    if let Some(name) = columns
        .iter()
        .find(|c| !c.is_empty() && !c.starts_with(|ch: char| ch.is_ascii_digit()))
    {
        return Ok(Err(format!(
            "its master walks the symbolic OID {name:?} (netpoller takes numeric OIDs: `snmptranslate -On {name}`)"
        )));
    }
    if master.status.as_deref() == Some("DISABLED") {
        return Ok(Err("its master is disabled in Zabbix".into()));
    }
    Ok(Ok(columns))
}

/// The parameters of a `walk[…]` or `discovery[…]` key, read as Zabbix reads item keys
/// (the loader's [`ItemKey::parse`]: quoted or not, a quoted one may hold `,` and `]`);
/// an OID's leading dot left out.
fn key_params(key: &str) -> Result<Vec<String>, String> {
    let parsed = ItemKey::parse(key).map_err(|e| format!("key {key:?}: {e}"))?;
    parsed
        .params
        .into_iter()
        .map(|p| match p {
            Param::Str(s) => {
                let s = s.trim_end();
                Ok(s.strip_prefix('.').unwrap_or(s).to_owned())
            }
            Param::Array(_) => Err(format!(
                "key {key:?} has an array parameter (it takes OIDs and macros)"
            )),
        })
        .collect()
}

/// An item [`item`] wrote.
struct Written<'a> {
    /// The key written (the template's macros resolved).
    key: String,
    /// The TOML inline table.
    toml: String,
    /// The OID it polls (an SNMP item's).
    oid: Option<String>,
    /// The key of the `walk[]` item whose row it polls instead (a dependent item's).
    walk: Option<&'a str>,
}

/// One item (an item prototype: `rows`) as a TOML inline table, or why netpoller
/// cannot poll it.
fn item<'a>(
    it: &'a Item,
    macros: &Macros,
    rows: bool,
    masters: &HashMap<&str, &Item>,
) -> Result<Written<'a>, String> {
    if it.status.as_deref() == Some("DISABLED") {
        return Err("disabled in Zabbix".into());
    }
    if it.discover.as_deref() == Some("NO_DISCOVER") {
        return Err("not discovered in Zabbix (NO_DISCOVER)".into());
    }
    let lld = |s: &str| s.replace(SNMPINDEX, "").contains("{#");
    if rows && !it.key.contains(SNMPINDEX) {
        return Err(format!(
            "its key has no {SNMPINDEX} (netpoller fills that one only)"
        ));
    }
    let texts = [
        &it.key,
        it.snmp_oid.as_deref().unwrap_or_default(),
        it.delay.as_deref().unwrap_or_default(),
    ];
    let steps = it.preprocessing.iter().flat_map(|s| {
        s.params()
            .into_iter()
            .chain(s.error_handler_params.as_deref())
    });
    if texts.into_iter().chain(steps).any(lld) {
        return Err(format!(
            "uses a discovery macro netpoller does not fill (it fills {SNMPINDEX} from indices)"
        ));
    }
    // Zabbix expands the template's macros in keys too: `icmppingloss[,{$ICMP.PACKETS}]`.
    let key = resolve(&it.key, macros)?;
    let base = key.split('[').next().unwrap_or_default();
    let mut t = format!("{{ key = {}", q(&key));
    // What the item polls on its own, or through the walk it depends on.
    let (mut delay, mut steps) = (it.delay.as_deref(), &it.preprocessing[..]);
    let (mut polled, mut walk) = (None, None);
    let dependent = match it.kind.as_str() {
        "DEPENDENT" => {
            let (oid, master) = walk_value(it, macros, masters)?;
            (delay, steps) = (master.delay.as_deref(), &it.preprocessing[1..]);
            walk = it.master_item.as_ref().map(|m| m.key.as_str());
            Some(oid)
        }
        _ => None,
    };
    match it.kind.as_str() {
        "SIMPLE" if poller::keys::IcmpKey::is_icmp_name(base) => {}
        "SIMPLE" => return Err(format!("simple check {base} (netpoller runs ICMP ones)")),
        "SNMP_AGENT" | "DEPENDENT" => {
            let oid = match dependent {
                Some(oid) => oid,
                None => resolve(it.snmp_oid.as_deref().unwrap_or_default(), macros)?,
            };
            let oid = oid.trim();
            // Zabbix 7's asynchronous form of one OID: `get[1.3.6.1.2.1.1.3.0]`, quoted
            // or not (Zabbix's key syntax).
            let one = match oid.starts_with("get[").then(|| key_params(oid)) {
                Some(Ok(mut p)) if p.len() == 1 => p.pop(),
                _ => None,
            };
            let oid = one.as_deref().unwrap_or(oid);
            if oid.ends_with(']') {
                return Err(format!(
                    "SNMP OID {oid:?} reads a table (walk[]: not imported; list one numeric OID per item)"
                ));
            }
            if oid.is_empty() {
                return Err("no SNMP OID".into());
            }
            if !oid.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
                return Err(format!(
                    "symbolic OID {oid:?} (netpoller takes numeric OIDs: `snmptranslate -On {oid}`)"
                ));
            }
            let vt = match it.value_type.as_deref().unwrap_or("UNSIGNED") {
                "UNSIGNED" => "uint",
                "FLOAT" => "float",
                "CHAR" | "TEXT" => "str",
                other => {
                    return Err(format!(
                        "value type {other} (netpoller stores numbers and text)"
                    ))
                }
            };
            write!(t, ", oid = {}, type = {}", q(oid), q(vt)).expect("to a String");
            polled = Some(oid.to_owned());
        }
        other => {
            return Err(format!(
                "item type {other} (netpoller polls ICMP and SNMP agents)"
            ))
        }
    }
    let every = interval(&resolve(delay.unwrap_or("1m"), macros)?)?;
    write!(t, ", interval = {}", q(&every)).expect("to a String");
    if !steps.is_empty() {
        // One line per item: TOML 1.0 has no newline inside an inline table.
        t.push_str(", preprocessing = [");
        for (i, s) in steps.iter().enumerate() {
            let params = s
                .params()
                .into_iter()
                .map(|p| resolve(p, macros).map(|p| q(&p)))
                .collect::<Result<Vec<_>, _>>()?;
            let sep = if i == 0 { "" } else { ", " };
            write!(
                t,
                "{sep}{{ type = {}, parameters = [{}]",
                q(&s.kind),
                params.join(", ")
            )
            .expect("to a String");
            // Zabbix writes the default handler out too; netpoller's default is the same.
            if let Some(h) = s
                .error_handler
                .as_deref()
                .filter(|h| *h != "ORIGINAL_ERROR")
            {
                write!(t, ", error_handler = {}", q(h)).expect("to a String");
            }
            if let Some(p) = &s.error_handler_params {
                if s.error_handler
                    .as_deref()
                    .is_some_and(|h| h != "ORIGINAL_ERROR")
                {
                    let p = resolve(p, macros)?;
                    write!(t, ", error_handler_params = {}", q(&p)).expect("to a String");
                }
            }
            t.push_str(" }");
        }
        t.push(']');
    }
    t.push_str(" }");
    // The loader decides: what it refuses is not written (its error says why).
    let probe = format!("[[templates]]\nname = \"probe\"\nitems = [ {t} ]\n");
    match crate::config::parse(&probe) {
        Ok(_) => Ok(Written {
            key,
            toml: t,
            oid: polled,
            walk,
        }),
        Err(errors) => Err(errors.first().map_or_else(
            || "refused by the config loader".into(),
            |e| e.message.clone(),
        )),
    }
}

/// Whether a section's items stand for table rows, and who finds them.
enum Rows<'a> {
    /// Items, not prototypes.
    No,
    /// Each host lists them (`indices`).
    Listed,
    /// The section's discovery rule (this inline table) walks them.
    Walked(&'a str),
}

/// What [`convert`] made of an export.
#[derive(Default)]
struct Imported {
    /// The `[[templates]]`.
    toml: String,
    /// One line per item, item prototype and discovery rule not imported.
    skipped: Vec<String>,
    /// Items imported (item prototypes included).
    items: usize,
    /// Items and item prototypes not imported.
    not_items: usize,
    /// Discovery rules imported as templates of items per row, and not imported.
    rules: usize,
    not_rules: usize,
    /// Of `rules`, those netpoller walks itself (the others' rows a host lists).
    walked: usize,
    /// Keys of the `walk[]` items whose imported dependent items poll their rows.
    served: HashSet<String>,
    /// Those `walk[]` items (not polled themselves, not counted as not imported).
    walks: usize,
}

/// `s` on one comment line: control characters (a newline would end the comment and
/// let the export's text into the TOML) become spaces.
fn comment(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

impl Imported {
    /// One `[[templates]]` `name` of `items` (item prototypes: `rows`), with a comment
    /// per line of `head` and per item not imported. `false`: no item imported.
    /// `masters`: the template's items by key, for its dependent items.
    fn section(
        &mut self,
        name: &str,
        head: &[String],
        items: &[Item],
        macros: &Macros,
        rows: Rows<'_>,
        masters: &HashMap<&str, &Item>,
    ) -> bool {
        let (rows, discovery) = match rows {
            Rows::No => (false, None),
            Rows::Listed => (true, None),
            Rows::Walked(rule) => (true, Some(rule)),
        };
        let (mut list, mut notes, mut first) = (String::new(), Vec::new(), None);
        // The keys written (macros resolved, as the loader compares them) and the
        // export's key each came from.
        let mut keys: HashMap<String, &str> = HashMap::new();
        let (mut failed, mut walks) = (Vec::new(), Vec::new());
        for it in items {
            // Zabbix keeps a template's keys unique, but as written: two keys may
            // become one once its macros are resolved (`icmppingloss[,{$P}]` with
            // {$P} = 3, and `icmppingloss[,3]`). A key written twice would make the
            // template refused.
            let item = item(it, macros, rows, masters).and_then(|w| {
                match keys.entry(w.key.trim().to_owned()) {
                    Entry::Vacant(v) => {
                        v.insert(it.key.as_str());
                        Ok(w)
                    }
                    Entry::Occupied(o) if *o.get() == it.key => {
                        Err("its key repeats an item above".into())
                    }
                    Entry::Occupied(o) => Err(format!(
                        "its key repeats {:?} above once macros are resolved: both are {:?}",
                        o.get(),
                        o.key()
                    )),
                }
            });
            match item {
                Ok(w) => {
                    self.items += 1;
                    match discovery.filter(|_| rows) {
                        // The section's rule finds its rows (the section's name is the
                        // rule's).
                        Some(_) => {
                            let t = w.toml.strip_suffix(" }").unwrap_or(&w.toml);
                            writeln!(list, "  {t}, discovery = {} }},", q(name))
                        }
                        None => writeln!(list, "  {},", w.toml),
                    }
                    .expect("to a String");
                    if let Some(walk) = w.walk {
                        self.served.insert(walk.to_owned());
                    }
                    first.get_or_insert((it.key.as_str(), w.oid));
                }
                Err(why) => failed.push((it, why)),
            }
        }
        // After every item: a walk[] item's dependent items may come after it.
        for (it, why) in failed {
            let what = if rows { "item prototype" } else { "item" };
            if !rows && self.served.contains(&it.key) {
                self.walks += 1;
                walks.push(format!("{what} {:?} ({:?})", it.name, it.key));
                continue;
            }
            self.not_items += 1;
            notes.push(format!("{what} {:?} ({:?}): {why}", it.name, it.key));
        }
        let imported = first.is_some();
        if imported || !rows {
            write!(self.toml, "\n[[templates]]\nname = {}\n", q(name)).expect("to a String");
            for h in head {
                writeln!(self.toml, "# {}", comment(h)).expect("to a String");
            }
            if let (Some((key, _)), Some(rule)) = (first.as_ref().filter(|_| rows), discovery) {
                let hint = format!(
                    "items = [ {{ key = {}, indices = \"1-48\" }}, ... ]",
                    q(key)
                );
                writeln!(
                    self.toml,
                    "# walks each host's rows itself (a host may list its own instead: {})",
                    comment(&hint)
                )
                .expect("to a String");
                writeln!(self.toml, "discovery = [ {rule} ]").expect("to a String");
            } else if let Some((key, oid)) = first.filter(|_| rows) {
                let hint = format!(
                    "items = [ {{ key = {}, indices = \"1-48\" }}, ... ]",
                    q(key)
                );
                writeln!(
                    self.toml,
                    "# polls the rows a host lists: {}",
                    comment(&hint)
                )
                .expect("to a String");
                // The item's column: walking it on a host gives that host's rows.
                let column = oid
                    .as_deref()
                    .and_then(|o| o.strip_suffix(SNMPINDEX))
                    .map(|c| c.trim_end_matches('.'));
                if let Some(column) = column {
                    writeln!(
                        self.toml,
                        "# a host's rows: netpoller snmp walk --indices -c COMMUNITY HOST {}",
                        comment(column)
                    )
                    .expect("to a String");
                }
            }
            for w in &walks {
                writeln!(
                    self.toml,
                    "# not polled itself: {}: its dependent items poll their rows' OIDs",
                    comment(w)
                )
                .expect("to a String");
            }
            for n in &notes {
                writeln!(self.toml, "# not imported: {}", comment(n)).expect("to a String");
            }
            write!(self.toml, "items = [\n{list}]\n").expect("to a String");
        }
        self.skipped
            .extend(notes.into_iter().map(|n| format!("{name}: {n}")));
        imported
    }
}

/// The export as netpoller TOML, and what was not imported. A template's discovery
/// rule becomes a template of its own, `TEMPLATE: RULE`, whose items stand for table
/// rows (`{#SNMPINDEX}`) that a host lists (`indices`) instead of Zabbix discovering
/// them.
fn convert(export: &ZabbixExport, only: &[String], source: &str) -> Imported {
    let version = if export.version.is_empty() {
        "?"
    } else {
        &export.version
    };
    let mut done = Imported {
        toml: format!(
            "# Imported by `netpoller import-template` from {} (Zabbix {}).\n",
            comment(source),
            comment(version)
        ),
        ..Imported::default()
    };
    // Every template name written, so a rule's template never takes one twice.
    let mut names: HashSet<String> = export
        .templates
        .iter()
        .map(|t| t.template.clone())
        .collect();
    for tpl in export
        .templates
        .iter()
        .filter(|t| only.is_empty() || only.contains(&t.template))
    {
        let macros = Macros::new(&tpl.macros);
        // The first item of a key, as the template's section takes it (a repeated key
        // is left out there).
        let mut masters: HashMap<&str, &Item> = HashMap::new();
        for i in &tpl.items {
            masters.entry(i.key.as_str()).or_insert(i);
        }
        let mut head = Vec::new();
        if !tpl.templates.is_empty() {
            let names: Vec<String> = tpl
                .templates
                .iter()
                .map(|l| format!("{:?}", l.name))
                .collect();
            head.push(format!(
                "Zabbix links {} to it: a host takes their items only when it lists them too",
                names.join(", ")
            ));
        }
        let mut rules = String::new();
        let mut parts = Vec::new();
        for rule in &tpl.discovery_rules {
            let what = format!("discovery rule {:?} ({:?})", rule.name, rule.key);
            if rule.status.as_deref() == Some("DISABLED") {
                done.not_rules += 1;
                parts.push(format!("not imported: {what}: disabled in Zabbix"));
                continue;
            }
            let mut name = format!("{}: {}", tpl.template, rule.name);
            if !names.insert(name.clone()) {
                name = format!("{}: {} [{}]", tpl.template, rule.name, rule.key);
                names.insert(name.clone());
            }
            let mut head = vec![format!(
                "Zabbix's {what} finds the rows of these items; netpoller"
            )];
            // netpoller polls every prototype for every row the rule takes.
            for o in rule.overrides.iter().filter(|o| o.on_items()) {
                let l = format!(
                    "its override {:?} changes item prototypes for the rows its filter takes (not discovered, disabled, another interval): not applied, every item is polled for every row",
                    o.name
                );
                head.push(format!("discovery: {l}"));
                done.skipped.push(format!("{name}: discovery: {l}"));
            }
            let walked = match discovery_rule(rule, &name, &macros, &masters) {
                Ok(r) => {
                    head.extend(r.remark.map(|m| format!("discovery: {m}")));
                    for l in r.left {
                        head.push(format!("discovery: {l}"));
                        done.skipped.push(format!("{name}: discovery: {l}"));
                    }
                    Some(r.toml)
                }
                Err(why) => {
                    head.push(format!("discovery not walked by netpoller: {why}"));
                    None
                }
            };
            let mut part = Imported::default();
            let rows = &rule.item_prototypes;
            let found = walked.as_deref().map_or(Rows::Listed, Rows::Walked);
            if part.section(&name, &head, rows, &macros, found, &masters) {
                done.rules += 1;
                done.walked += usize::from(walked.is_some());
                rules.push_str(&part.toml);
            } else {
                done.not_rules += 1;
                let n = rule.item_prototypes.len();
                parts.push(format!(
                    "not imported: {what}: none of its {n} item prototypes can be polled"
                ));
            }
            done.items += part.items;
            done.not_items += part.not_items;
            done.skipped.extend(part.skipped);
            done.served.extend(part.served);
        }
        for p in &parts {
            done.skipped.push(format!(
                "{}: {}",
                tpl.template,
                p.trim_start_matches("not imported: ")
            ));
        }
        head.extend(parts);
        done.section(
            &tpl.template,
            &head,
            &tpl.items,
            &macros,
            Rows::No,
            &masters,
        );
        // The next template's walk[] items are its own.
        done.served.clear();
        done.toml.push_str(&rules);
    }
    done
}

/// Reads an export in either of Zabbix's formats: JSON when the text starts with `{`
/// (after white space), YAML otherwise. Both have the same fields; YAML's plain
/// scalars are taken as the text they are (`value: 3` is the string `"3"`, as in JSON),
/// so neither format's numbers-as-text change on the way.
fn parse(text: &str) -> anyhow::Result<ZabbixExport> {
    let text = super::without_bom(text);
    let export: Export = if text.trim_start().starts_with('{') {
        serde_json::from_str(text)?
    } else {
        // The parser's default budget (250,000 nodes) is for untrusted input of any
        // size; an export of several large templates has more. The file is the
        // operator's and in memory already: nodes and events may grow with its size
        // (a node takes at least a byte), while the limits on aliases, anchors and
        // depth that stop a "billion laughs" stay as they are.
        let mut budget = serde_saphyr::Budget::default();
        budget.max_nodes = budget.max_nodes.max(text.len());
        budget.max_events = budget.max_events.max(text.len().saturating_mul(2));
        budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(text.len());
        let mut options = serde_saphyr::Options::default();
        options.budget = Some(budget);
        serde_saphyr::from_str_with_options(text, options)?
    };
    Ok(export.zabbix_export)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let export = parse(&text).with_context(|| {
        format!(
            "{} is not a Zabbix template export (Zabbix 6.0+: Export → YAML or JSON)",
            args.file.display()
        )
    })?;
    let major: u32 = export
        .version
        .split('.')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if major < 6 {
        eprintln!(
            "warning: a Zabbix {:?} export: netpoller reads the 6.0+ format (5.x parameters are read too); check what is imported",
            export.version
        );
    }
    let missing: Vec<&String> = args
        .only
        .iter()
        .filter(|n| !export.templates.iter().any(|t| &t.template == *n))
        .collect();
    if !missing.is_empty() {
        let names: Vec<&str> = export
            .templates
            .iter()
            .map(|t| t.template.as_str())
            .collect();
        anyhow::bail!(
            "no template {missing:?} in {} (it has {names:?})",
            args.file.display()
        );
    }
    let done = convert(&export, &args.only, &args.file.display().to_string());
    print!("{}", done.toml);
    // The global --quiet: the summary only (the output's comments still list them).
    if !crate::telemetry::quiet() {
        for s in &done.skipped {
            eprintln!("not imported: {s}");
        }
    }
    eprintln!(
        "{} items imported ({} discovery rules as templates of items per table row, {} of them walked by netpoller); not imported: {} items, {} discovery rules{}",
        done.items,
        done.rules,
        done.walked,
        done.not_items,
        done.not_rules,
        match done.walks {
            0 => String::new(),
            n => format!("; {n} walk[] items polled through their dependent items"),
        }
    );
    Ok(if done.items > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use poller::preprocess::{OnFail, Step};
    use poller::value::ValueType;

    const EXPORT: &str = include_str!("../../tests/data/zabbix_export_templates.json");

    fn export() -> ZabbixExport {
        parse(EXPORT).unwrap()
    }

    #[test]
    fn an_export_becomes_templates_a_host_can_use() {
        let Imported {
            toml,
            skipped,
            items: imported,
            not_items,
            rules,
            not_rules,
            walks,
            ..
        } = convert(&export(), &[], "export.json");
        assert_eq!(walks, 0, "no walk[] items");
        assert_eq!(
            (imported, not_items, rules, not_rules),
            (9 + 2, 8 + 1, 1, 0),
            "{toml}"
        );
        // The discovery rule is a template whose rows the host lists.
        let host = "\n[[hosts]]\nname = \"sw-1\"\nip = \"127.0.20.1\"\n\
            templates = [\"ICMP Ping\", \"Network Generic Device by SNMP\", \
            \"Network Generic Device by SNMP: Network interfaces discovery\"]\n\
            items = [ { key = \"net.if.in[ifHCInOctets.{#SNMPINDEX}]\", indices = \"2-3\" }, \
            { key = \"net.if.status[ifOperStatus.{#SNMPINDEX}]\", indices = \"2-3\" } ]\n";
        let cfg = crate::config::parse(&format!("{toml}{host}"))
            .unwrap_or_else(|e| panic!("{e:#?}\n{toml}"));
        let items = &cfg.hosts[0].items;
        let get = |key: &str| {
            items
                .iter()
                .find(|i| &*i.key == key)
                .unwrap_or_else(|| panic!("no {key} in {items:#?}"))
        };
        let steps = |key: &str| get(key).pre.clone().map(|p| p.as_slice().to_vec());
        // ICMP: Zabbix's defaults (1m, the key's type); template macros resolved (in
        // the interval, and in the key: `icmppingsec[,{$ICMP.PACKETS},,,,max]`).
        assert_eq!(get("icmpping").interval_ms, 60_000);
        assert_eq!(get("icmppingloss").value_type, ValueType::Float);
        assert_eq!(get("icmppingsec[,5,,,,max]").interval_ms, 30_000);
        // SNMP: value types, intervals (flexible: the fixed part; seconds), steps.
        assert_eq!(get("system.descr[sysDescr.0]").value_type, ValueType::Str);
        assert_eq!(
            get("system.net.uptime[sysUpTime.0]").value_type,
            ValueType::Uint
        );
        assert_eq!(get("system.hw.firmware").interval_ms, 3_600_000);
        assert_eq!(get("sensor.temp.value[inlet]").interval_ms, 180_000);
        assert_eq!(
            steps("net.if.in[ifHCInOctets.1]").unwrap(),
            [Step::ChangePerSecond, Step::Multiplier(8.0)]
        );
        let firmware = steps("system.hw.firmware").unwrap();
        assert_eq!(firmware[0].on_fail, OnFail::Value("unknown".into()));
        assert_eq!(firmware[1], Step::DiscardUnchangedHeartbeat(86_400));
        // IN_RANGE's bounds from macros, the context macro falling back to the plain one.
        let range = steps("sensor.temp.value[inlet]").unwrap();
        assert_eq!(
            range[0].to_string(),
            "IN_RANGE([-40, 150]) (on fail: discard)"
        );
        // Zabbix 7's get[] of one OID is that OID.
        assert_eq!(
            get("system.contact[sysContact.0]").value_type,
            ValueType::Str
        );
        assert_eq!(
            steps("net.if.in[ifHCInOctets.3]").unwrap(),
            [Step::ChangePerSecond, Step::Multiplier(8.0)]
        );
        assert_eq!(get("net.if.status[ifOperStatus.2]").interval_ms, 60_000);
        assert_eq!(items.len(), 9 + 4);
        // Each item left out, with its reason, in the output and the list.
        let why = |name: &str| {
            skipped
                .iter()
                .find(|s| s.contains(&format!("{name:?}")))
                .unwrap_or_else(|| panic!("{name} not listed: {skipped:#?}"))
                .clone()
        };
        assert!(why("HTTPS service").contains("simple check net.tcp.service"));
        assert!(why("SNMP agent availability").contains("item type INTERNAL"));
        assert!(why("System name").contains("snmptranslate -On SNMPv2-MIB::sysName.0"));
        assert!(why("CPU utilization").contains("\"JAVASCRIPT\""));
        assert!(
            toml.contains("# Zabbix links \"ICMP Ping\" to it"),
            "linked templates named: {toml}"
        );
        assert!(why("Memory free").contains("macro {$MEM.DELAY} has no value"));
        assert!(why("Memory utilization").contains("DEPENDENT"));
        assert!(why("Fan status").contains("disabled"));
        assert!(why("Interfaces table").contains("reads a table"));
        assert!(why("Interface {#IFNAME}: Alias").contains("has no {#SNMPINDEX}"));
        assert_eq!(skipped.len(), 9, "{skipped:#?}");
        for s in &skipped {
            let (_, note) = s.split_once(": item").unwrap();
            let note = format!("item{note}");
            assert!(toml.contains(&format!("# not imported: {note}")), "{note}");
        }
    }

    #[test]
    fn what_an_export_says_stays_in_comments_and_names_stay_unique() {
        // Text from the file (version, linked names, keys) must not become TOML: a
        // newline in it would add a host of the file's choosing.
        let evil = "6.0\n[[hosts]]\nname = \"evil\"\nip = \"127.0.99.1\"\n#";
        let item = |key: &str| {
            serde_json::json!({"name": "n", "type": "SNMP_AGENT", "key": key,
                "snmp_oid": "1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}"})
        };
        let export = serde_json::json!({"zabbix_export": {"version": evil, "templates": [{
        "template": "T",
        "templates": [{"name": evil}],
        "items": [{"name": "x", "type": "SIMPLE", "key": "net.tcp\r.service\u{1}[\n[[hosts]]"},
                  {"name": "p", "type": "SIMPLE", "key": "icmpping"}],
        "discovery_rules": [
            {"name": "If", "key": "a\n[[hosts]]", "item_prototypes": [item("in[{#SNMPINDEX}]")]},
            {"name": "If", "key": "b", "item_prototypes": [item("out[{#SNMPINDEX}]")]},
            {"name": "Off", "key": "c", "status": "DISABLED", "item_prototypes": [item("c[{#SNMPINDEX}]")]},
            {"name": "Some", "key": "d", "item_prototypes": [
                {"name": "nd", "type": "SNMP_AGENT", "key": "nd[{#SNMPINDEX}]", "discover": "NO_DISCOVER",
                 "snmp_oid": "1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}"},
                {"name": "lld", "type": "SNMP_AGENT", "key": "st[{#SNMPINDEX}]",
                 "snmp_oid": "1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}",
                 "preprocessing": [{"type": "STR_REPLACE", "parameters": ["{#IFNAME}", "x"]}]}]}
        ]}]}});
        let export: Export = serde_json::from_value(export).unwrap();
        let done = convert(&export.zabbix_export, &[], "x\n[[hosts]]");
        let cfg =
            crate::config::parse(&done.toml).unwrap_or_else(|e| panic!("{e:#?}\n{}", done.toml));
        assert!(
            cfg.hosts.is_empty(),
            "no host from the file's text:\n{}",
            done.toml
        );
        // Two rules of one name: two templates, one named by its key.
        assert!(done.toml.contains("name = \"T: If\"\n"), "{}", done.toml);
        assert!(
            done.toml.contains("name = \"T: If [b]\"\n"),
            "{}",
            done.toml
        );
        assert_eq!((done.items, done.rules, done.not_rules), (3, 2, 2));
        let why = |what: &str| done.skipped.iter().any(|s| s.contains(what));
        assert!(why("\"Off\" (\"c\"): disabled"), "{:#?}", done.skipped);
        assert!(why("NO_DISCOVER"), "{:#?}", done.skipped);
        assert!(why("discovery macro"), "{:#?}", done.skipped);
        assert!(
            why("\"Some\" (\"d\"): none of its 2 item prototypes"),
            "{:#?}",
            done.skipped
        );
    }

    #[test]
    fn zabbix_5_parameters_are_read_and_a_repeated_key_is_left_out() {
        let export = serde_json::json!({"zabbix_export": {"version": "5.0", "templates": [{
        "template": "Old",
        "items": [
            {"name": "in", "type": "SNMP_AGENT", "key": "in", "snmp_oid": "1.3.6.1.2.1.2.2.1.10.1",
             "preprocessing": [{"type": "CHANGE_PER_SECOND", "params": ""},
                               {"type": "MULTIPLIER", "params": "8"}]},
            {"name": "range", "type": "SNMP_AGENT", "key": "t", "snmp_oid": "1.3.6.1.4.1.9.1",
             "value_type": "FLOAT",
             "preprocessing": [{"type": "IN_RANGE", "params": "-40\n150",
                                "error_handler": "DISCARD_VALUE"}]},
            {"name": "again", "type": "SNMP_AGENT", "key": "in", "snmp_oid": "1.3.6.1.2.1.2.2.1.10.2"}
        ]}]}});
        let export: Export = serde_json::from_value(export).unwrap();
        let done = convert(&export.zabbix_export, &[], "old.json");
        assert_eq!((done.items, done.not_items), (2, 1), "{}", done.toml);
        assert!(done.toml.contains(r#"parameters = ["8"]"#), "{}", done.toml);
        assert!(
            done.toml.contains(r#"parameters = ["-40", "150"]"#),
            "{}",
            done.toml
        );
        assert!(
            done.skipped[0].contains("\"again\" (\"in\"): its key repeats"),
            "{:?}",
            done.skipped
        );
        let host = "[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\ntemplates = [\"Old\"]\n";
        crate::config::parse(&format!("{}{host}", done.toml))
            .unwrap_or_else(|e| panic!("{e:#?}\n{}", done.toml));
    }

    /// Zabbix keeps a template's keys unique as written; two that are one key once the
    /// template's macros are resolved are written once (the template would be refused).
    #[test]
    fn keys_equal_once_macros_are_resolved_are_written_once() {
        let export: Export = serde_json::from_value(serde_json::json!({"zabbix_export": {"version": "6.0", "templates": [{
            "template": "T", "macros": [{"macro": "{$P}", "value": "3"}],
            "items": [{"name": "a", "type": "SIMPLE", "key": "icmppingloss[,{$P}]", "value_type": "FLOAT"},
                      {"name": "b", "type": "SIMPLE", "key": "icmppingloss[,3]", "value_type": "FLOAT"}]}]}}))
        .unwrap();
        let done = convert(&export.zabbix_export, &[], "t.json");
        let host = "[[hosts]]\nname = \"h\"\nip = \"127.0.0.1\"\ntemplates = [\"T\"]\n";
        if let Err(e) = crate::config::parse(&format!("{}{host}", done.toml)) {
            panic!("{e:#?}\n{}", done.toml)
        }
        assert_eq!((done.items, done.not_items), (1, 1), "{}", done.toml);
        assert_eq!(
            done.skipped,
            [
                r#"T: item "b" ("icmppingloss[,3]"): its key repeats "icmppingloss[,{$P}]" above once macros are resolved: both are "icmppingloss[,3]""#
            ],
        );
    }

    /// Zabbix's other format: the fixture as Zabbix writes YAML (block style, numbers and
    /// macros quoted) imports exactly as its JSON does.
    #[test]
    fn a_yaml_export_imports_as_its_json_does() {
        let yaml = include_str!("../../tests/data/zabbix_export_templates.yaml");
        assert!(yaml.starts_with("zabbix_export:\n  version: '6.0'"));
        let from_yaml = convert(&parse(yaml).unwrap(), &[], "export");
        let from_json = convert(&parse(EXPORT).unwrap(), &[], "export");
        assert_eq!(from_yaml.toml, from_json.toml);
        assert_eq!(from_yaml.skipped, from_json.skipped);
        assert_eq!((from_yaml.items, from_yaml.rules), (11, 1));
    }

    /// A YAML scalar is the text it is, whatever YAML 1.1 would make of it: an unquoted
    /// `30` interval, `0.50` multiplier, `on` replacement and `0123` macro value reach
    /// the output as written (a YAML-to-JSON converter's `true`, `0.5` or `83` would
    /// change what the item does, or fail to load), and 5.x `params` keep their lines.
    #[test]
    fn yaml_scalars_stay_the_text_they_are() {
        let yaml = r#"
zabbix_export:
  version: 6.0
  templates:
    - template: Plain
      macros:
        - macro: '{$ZERO}'
          value: 0123
      items:
        - name: status
          type: SNMP_AGENT
          key: status
          snmp_oid: 1.3.6.1.2.1.2.2.1.8.1
          value_type: CHAR
          delay: 30
          preprocessing:
            - type: STR_REPLACE
              parameters:
                - up
                - on
            - type: STR_REPLACE
              parameters:
                - x
                - '{$ZERO}'
        - name: speed
          type: SNMP_AGENT
          key: speed
          snmp_oid: 1.3.6.1.2.1.2.2.1.5.1
          value_type: FLOAT
          preprocessing:
            - type: MULTIPLIER
              parameters:
                - 0.50
            - type: IN_RANGE
              params: |-
                -1
                1e12
"#;
        let done = convert(&parse(yaml).unwrap(), &[], "plain.yaml");
        assert_eq!((done.items, done.not_items), (2, 0), "{:?}", done.skipped);
        for want in [
            r#"interval = "30s""#,
            r#"parameters = ["up", "on"]"#,
            r#"parameters = ["x", "0123"]"#,
            r#"parameters = ["0.50"]"#,
            r#"parameters = ["-1", "1e12"]"#,
        ] {
            assert!(done.toml.contains(want), "{want} in:\n{}", done.toml);
        }
        let host = "[[hosts]]\nname = \"h\"\nip = \"127.0.20.1\"\ntemplates = [\"Plain\"]\n";
        crate::config::parse(&format!("{}{host}", done.toml))
            .unwrap_or_else(|e| panic!("{e:#?}\n{}", done.toml));
        // A broken file is refused with the place YAML broke.
        let Err(err) = parse("zabbix_export:\n  templates: [\n") else {
            panic!("a broken file parsed");
        };
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
    }

    /// What a dependent item needs to be polled on its own, each refusal with its reason.
    #[test]
    fn a_dependent_item_is_imported_only_as_a_row_of_its_walk() {
        let walk = |key: &str, oid: &str, steps: serde_json::Value| {
            serde_json::json!({"name": key, "type": "SNMP_AGENT", "key": key,
                "snmp_oid": oid, "value_type": "TEXT", "delay": "2m", "preprocessing": steps})
        };
        let dep = |key: &str, master: &str, oid: &str, handler: Option<&str>| {
            let mut step = serde_json::json!({"type": "SNMP_WALK_VALUE", "parameters": [oid, "0"]});
            if let Some(h) = handler {
                step["error_handler"] = h.into();
            }
            serde_json::json!({"name": key, "type": "DEPENDENT", "key": key,
                "master_item": {"key": master}, "preprocessing": [step]})
        };
        // Not a dependent: its master_item is no reason to leave the walk out.
        let mut stray = walk("stray", "1.3.6.1.2.1.1.5.0", serde_json::json!([]));
        stray["master_item"] = serde_json::json!({"key": "cooked.walk"});
        let export = serde_json::json!({"zabbix_export": {"version": "7.0", "templates": [{
        "template": "T",
        "items": [
            walk("if.walk", "walk[1.3.6.1.2.1.2.2.1.1]", serde_json::json!([])),
            walk("cooked.walk", "walk[1.3.6.1.2.1.2.2.1.2]",
                 serde_json::json!([{"type": "TRIM", "parameters": [" "]}])),
            dep("index", "if.walk", "1.3.6.1.2.1.2.2.1.1.7", None),
            dep("not.a.row", "if.walk", "1.3.6.1.2.1.2.2.1.10.7", None),
            dep("orphan", "elsewhere", "1.3.6.1.2.1.2.2.1.1.7", None),
            dep("cooked", "cooked.walk", "1.3.6.1.2.1.2.2.1.2.7", None),
            dep("handled", "if.walk", "1.3.6.1.2.1.2.2.1.1.8", Some("CUSTOM_VALUE")),
            // Zabbix's key syntax: a quoted OID; walking one OID GETs it.
            walk("uptime.walk", r#"walk["1.3.6.1.2.1.1.3.0"]"#, serde_json::json!([])),
            dep("uptime", "uptime.walk", ".1.3.6.1.2.1.1.3.0", None),
            walk("mib.walk", "walk[IF-MIB::ifDescr]", serde_json::json!([])),
            dep("named", "mib.walk", "1.3.6.1.2.1.2.2.1.2.7", None),
            stray,
        ]}]}});
        let export: Export = serde_json::from_value(export).unwrap();
        let done = convert(&export.zabbix_export, &[], "t.json");
        assert_eq!(
            (done.items, done.not_items, done.walks),
            (3, 7, 2),
            "{}",
            done.toml
        );
        for want in [
            r#"{ key = "index", oid = "1.3.6.1.2.1.2.2.1.1.7", type = "uint", interval = "2m" }"#,
            r#"{ key = "uptime", oid = "1.3.6.1.2.1.1.3.0", type = "uint", interval = "2m" }"#,
        ] {
            assert!(done.toml.contains(want), "{want} in\n{}", done.toml);
        }
        for (key, why) in [
            ("not.a.row", "is not under the OIDs its master walks"),
            ("orphan", "its master is not an item of this template"),
            ("cooked", "its master has preprocessing steps of its own"),
            ("handled", "its SNMP_WALK_VALUE step has an error handler"),
            ("cooked.walk", "reads a table"),
            ("named", "walks the symbolic OID \"IF-MIB::ifDescr\""),
            ("mib.walk", "reads a table"),
        ] {
            assert!(
                done.skipped
                    .iter()
                    .any(|s| s.contains(&format!("({key:?})")) && s.contains(why)),
                "{key}: {why} in {:?}",
                done.skipped
            );
        }
    }

    /// A byte order mark is not content, in either format; a YAML export larger than
    /// the YAML parser's default budget (250,000 nodes) reads as its JSON would.
    #[test]
    fn a_bom_and_a_large_yaml_export_are_read() {
        let yaml = include_str!("../../tests/data/zabbix_export_templates.yaml");
        assert_eq!(
            parse(&format!("\u{feff}{EXPORT}")).unwrap().templates.len(),
            2
        );
        assert_eq!(
            parse(&format!("\u{feff}{yaml}")).unwrap().templates.len(),
            2
        );
        let n = 30_000;
        let mut big = String::from(
            "zabbix_export:\n  version: '7.0'\n  templates:\n    - template: Big\n      items:\n",
        );
        for i in 0..n {
            big.push_str(&format!(
                "        - name: 'item {i}'\n          type: SNMP_AGENT\n          key: 'k[{i}]'\n          snmp_oid: '1.3.6.1.4.1.9.{i}'\n          value_type: FLOAT\n"
            ));
        }
        let export = parse(&big).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(export.templates[0].items.len(), n);
    }

    /// Zabbix's LLD overrides change item prototypes for the rows their filter takes
    /// (not discovered, disabled, another interval): netpoller polls every prototype
    /// for every row, so each override that acts on item prototypes is said; one on
    /// triggers or graphs only changes nothing netpoller polls.
    #[test]
    fn overrides_of_item_prototypes_are_said_not_applied() {
        let proto = serde_json::json!({"name": "in", "type": "SNMP_AGENT",
            "key": "in[{#SNMPINDEX}]", "snmp_oid": "1.3.6.1.2.1.2.2.1.10.{#SNMPINDEX}"});
        let yaml = serde_json::json!({"zabbix_export": {"version": "7.0", "templates": [{
        "template": "T",
        "discovery_rules": [{
            "name": "If", "key": "if.discovery", "type": "SNMP_AGENT",
            "snmp_oid": "discovery[{#IFTYPE},1.3.6.1.2.1.2.2.1.3]",
            "item_prototypes": [proto],
            "overrides": [
                // operationobject left out: Zabbix's default, ITEM_PROTOTYPE.
                {"name": "Skip virtual", "step": "1",
                 "filter": {"conditions": [{"macro": "{#IFTYPE}", "value": "^53$", "formulaid": "A"}]},
                 "operations": [{"operator": "LIKE", "value": "in", "discover": "NO_DISCOVER"}]},
                {"name": "Quiet triggers", "step": "2",
                 "operations": [{"operationobject": "TRIGGER_PROTOTYPE", "status": "DISABLED"}]},
            ]}]}]}});
        let export: Export = serde_json::from_value(yaml).unwrap();
        let done = convert(&export.zabbix_export, &[], "t.json");
        assert_eq!(done.items, 1, "{}", done.toml);
        let said: Vec<&String> = done
            .skipped
            .iter()
            .filter(|s| s.contains("override"))
            .collect();
        assert_eq!(said.len(), 1, "{:#?}", done.skipped);
        assert!(said[0].contains("\"Skip virtual\""), "{said:?}");
        assert!(
            done.toml
                .contains("# discovery: its override \"Skip virtual\""),
            "{}",
            done.toml
        );
    }

    /// Zabbix's key syntax lets get[]'s OID be quoted, as walk[]'s (which is read so).
    #[test]
    fn a_quoted_get_oid_is_that_oid() {
        let export = serde_json::json!({"zabbix_export": {"version": "7.0", "templates": [{
        "template": "T",
        "items": [{"name": "name", "type": "SNMP_AGENT", "key": "system.name",
                   "snmp_oid": "get[\"1.3.6.1.2.1.1.5.0\"]", "value_type": "CHAR"}]}]}});
        let export: Export = serde_json::from_value(export).unwrap();
        let done = convert(&export.zabbix_export, &[], "t.json");
        assert_eq!(done.items, 1, "{:?}", done.skipped);
        assert!(
            done.toml.contains(r#"oid = "1.3.6.1.2.1.1.5.0""#),
            "{}",
            done.toml
        );
    }

    /// walk[], discovery[] and get[] keys are read by the loader's key parser: a quoted
    /// parameter may hold a comma, an array parameter is refused.
    #[test]
    fn oid_keys_are_read_as_item_keys() {
        assert_eq!(
            key_params(r#"walk[.1.3.6.1.2.1.2.2.1.2, "1.3.6.1.2.1.31.1.1.1.18"]"#).unwrap(),
            ["1.3.6.1.2.1.2.2.1.2", "1.3.6.1.2.1.31.1.1.1.18"]
        );
        assert_eq!(
            key_params(r#"discovery[{#A},"x,y",{#B},1.3.6.1]"#).unwrap(),
            ["{#A}", "x,y", "{#B}", "1.3.6.1"]
        );
        let err = key_params("walk[[1.3.6.1,1.3.6.2]]").unwrap_err();
        assert!(err.contains("array"), "{err}");
        assert!(key_params("walk[1.3.6.1").is_err());
    }

    #[test]
    fn one_template_can_be_picked() {
        let only = convert(&export(), &["ICMP Ping".into()], "x");
        assert_eq!((only.items, only.skipped.len(), only.rules), (3, 1, 0));
        assert!(!only.toml.contains("SNMP"), "{}", only.toml);
    }

    #[test]
    fn macros_and_intervals_read_as_zabbix_writes_them() {
        let mac = |name: &str, value: &str, kind: Option<&str>| Macro {
            name: name.into(),
            value: value.into(),
            kind: kind.map(Into::into),
        };
        let m = Macros::new(&[
            mac("{$A}", "1", None),
            mac("{$B:\"x\"}", "ctx", None),
            mac("{$B}", "plain", None),
            mac("{$Q:x}", "q", None),
            mac("{$BR:\"a}b\"}", "brace", None),
            mac("{$R:regex:\"^eth\"}", "7", None),
            mac("{$R}", "3", None),
            mac("{$S}", "", Some("SECRET_TEXT")),
        ]);
        assert_eq!(resolve("a{$A}b{$A}", &m).unwrap(), "a1b1");
        assert_eq!(resolve("{$B:\"x\"}/{$B:\"y\"}", &m).unwrap(), "ctx/plain");
        // A context written with or without quotes, spaces around it, a `}` inside.
        assert_eq!(
            resolve("{$B:x}|{$B: \"x\"}|{$Q:\"x\"}", &m).unwrap(),
            "ctx|ctx|q"
        );
        assert_eq!(resolve("{$BR:\"a}b\"}", &m).unwrap(), "brace");
        assert_eq!(resolve("no macro {#LLD}", &m).unwrap(), "no macro {#LLD}");
        assert!(resolve("{$C}", &m).unwrap_err().contains("{$C}"));
        // What netpoller cannot know is refused, not guessed.
        assert!(resolve("{$S}", &m).unwrap_err().contains("secret"));
        assert!(resolve("{$R:\"eth0\"}", &m)
            .unwrap_err()
            .contains("regex contexts"));
        assert_eq!(resolve("{$R}", &m).unwrap(), "3");
        assert_eq!(interval("90").unwrap(), "90s");
        assert_eq!(interval("5m;10s/1-5,09:00-18:00").unwrap(), "5m");
        assert!(interval("0;10s/1-5,09:00-18:00").is_err());
    }
}
