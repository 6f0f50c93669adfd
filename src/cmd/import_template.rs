//! `netpoller import-template`: a Zabbix template export (JSON) as netpoller
//! `[[templates]]`, so a network team keeps the items, intervals and preprocessing it
//! already has in Zabbix.
//!
//! What is imported: ICMP simple checks (`icmpping`, `icmppingloss`, `icmppingsec`)
//! and SNMP agent items with a numeric OID, with their interval (the first part of a
//! flexible one) and preprocessing steps; template macros (`{$NAME}`, with context too)
//! are resolved from the template's own values. Everything else is listed with the
//! reason, as a comment in the output and on stderr: other item types (Zabbix agent,
//! dependent, calculated, ...), symbolic OIDs and `walk[]`, macros without a value,
//! steps netpoller does not run (JavaScript, JSONPath, ...), discovery macros other
//! than `{#SNMPINDEX}`, disabled items. A discovery rule becomes a template of its
//! item prototypes, items per table row whose rows a host lists (`indices`) where
//! Zabbix would discover them. Templates a template
//! links in Zabbix are named in a comment: netpoller's templates do not link, so a host
//! lists each.
//!
//! Invariant: every item written loads: each is checked by the config loader itself
//! (a one-item template) before it is written, and one that does not load is listed
//! with the loader's error instead.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Deserialize;

use crate::config::SNMPINDEX;

/// Arguments of `netpoller import-template`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Zabbix template export in JSON (Zabbix 6.0 or later: Data collection →
    /// Templates → select → Export → JSON).
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
    item_prototypes: Vec<Item>,
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
    #[serde(default)]
    preprocessing: Vec<Step>,
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
    #[serde(default)]
    error_handler: Option<String>,
    #[serde(default)]
    error_handler_params: Option<String>,
}

/// `s` as a TOML string (quoted and escaped).
fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// `{$NAME}` and `{$NAME:"context"}` replaced by the template's values (a context
/// macro without its own value takes the plain one's, as in Zabbix). `Err`: the first
/// macro without a value.
fn resolve(text: &str, macros: &HashMap<&str, &str>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{$") {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let whole = &rest[start..start + len + 1];
        let plain = match whole.split_once(':') {
            Some((name, _)) => format!("{name}}}"),
            None => whole.to_owned(),
        };
        let value = macros
            .get(whole)
            .or_else(|| macros.get(plain.as_str()))
            .ok_or_else(|| format!("macro {whole} has no value in the template"))?;
        out.push_str(&rest[..start]);
        out.push_str(value);
        rest = &rest[start + whole.len()..];
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

const ICMP_KEYS: [&str; 3] = ["icmpping", "icmppingloss", "icmppingsec"];

/// One item (an item prototype: `rows`) as a TOML inline table, or why netpoller
/// cannot poll it.
fn item(it: &Item, macros: &HashMap<&str, &str>, rows: bool) -> Result<String, String> {
    if it.status.as_deref() == Some("DISABLED") {
        return Err("disabled in Zabbix".into());
    }
    let lld = |s: &str| s.replace(SNMPINDEX, "").contains("{#");
    if rows && !it.key.contains(SNMPINDEX) {
        return Err(format!(
            "its key has no {SNMPINDEX} (netpoller fills that one only)"
        ));
    }
    if lld(&it.key) || lld(it.snmp_oid.as_deref().unwrap_or_default()) {
        return Err(format!(
            "uses a discovery macro netpoller does not fill (it fills {SNMPINDEX} from indices)"
        ));
    }
    let base = it.key.split('[').next().unwrap_or_default();
    let mut t = format!("{{ key = {}", q(&it.key));
    match it.kind.as_str() {
        "SIMPLE" if ICMP_KEYS.contains(&base) => {}
        "SIMPLE" => return Err(format!("simple check {base} (netpoller runs ICMP ones)")),
        "SNMP_AGENT" => {
            let oid = resolve(it.snmp_oid.as_deref().unwrap_or_default(), macros)?;
            let oid = oid.trim();
            // Zabbix 7's asynchronous form of one OID: `get[1.3.6.1.2.1.1.3.0]`.
            let oid = match oid.strip_prefix("get[").and_then(|o| o.strip_suffix(']')) {
                Some(one) if !one.contains(',') => one.trim(),
                _ => oid,
            };
            if oid.ends_with(']') {
                return Err(format!(
                    "SNMP OID {oid:?} reads a table (walk[]: not imported; list one numeric OID per item)"
                ));
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
        }
        other => {
            return Err(format!(
                "item type {other} (netpoller polls ICMP and SNMP agents)"
            ))
        }
    }
    let every = interval(&resolve(it.delay.as_deref().unwrap_or("1m"), macros)?)?;
    write!(t, ", interval = {}", q(&every)).expect("to a String");
    if !it.preprocessing.is_empty() {
        t.push_str(",\n    preprocessing = [");
        for (i, s) in it.preprocessing.iter().enumerate() {
            let params = s
                .parameters
                .iter()
                .map(|p| resolve(p, macros).map(|p| q(&p)))
                .collect::<Result<Vec<_>, _>>()?;
            let sep = if i == 0 {
                ""
            } else {
                ",\n                     "
            };
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
        Ok(_) => Ok(t),
        Err(errors) => Err(errors.first().map_or_else(
            || "refused by the config loader".into(),
            |e| e.message.clone(),
        )),
    }
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
}

impl Imported {
    /// One `[[templates]]` `name` of `items` (item prototypes: `rows`), with a comment
    /// per line of `head` and per item not imported.
    fn section(
        &mut self,
        name: &str,
        head: &[String],
        items: &[Item],
        macros: &HashMap<&str, &str>,
        rows: bool,
    ) {
        let (mut list, mut notes) = (String::new(), Vec::new());
        for it in items {
            match item(it, macros, rows) {
                Ok(t) => {
                    self.items += 1;
                    writeln!(list, "  {t},").expect("to a String");
                }
                Err(why) => {
                    self.not_items += 1;
                    let what = if rows { "item prototype" } else { "item" };
                    notes.push(format!("{what} {:?} ({}): {why}", it.name, it.key));
                }
            }
        }
        write!(self.toml, "\n[[templates]]\nname = {}\n", q(name)).expect("to a String");
        for h in head {
            writeln!(self.toml, "# {h}").expect("to a String");
        }
        for n in &notes {
            writeln!(self.toml, "# not imported: {}", n.replace('\n', " ")).expect("to a String");
        }
        write!(self.toml, "items = [\n{list}]\n").expect("to a String");
        self.skipped
            .extend(notes.into_iter().map(|n| format!("{name}: {n}")));
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
            "# Imported by `netpoller import-template` from {source} (Zabbix {version}).\n"
        ),
        ..Imported::default()
    };
    for tpl in export
        .templates
        .iter()
        .filter(|t| only.is_empty() || only.contains(&t.template))
    {
        let macros: HashMap<&str, &str> = tpl
            .macros
            .iter()
            .map(|m| (m.name.as_str(), m.value.as_str()))
            .collect();
        let mut head = Vec::new();
        if !tpl.templates.is_empty() {
            let names: Vec<&str> = tpl.templates.iter().map(|l| l.name.as_str()).collect();
            head.push(format!(
                "Zabbix links {} to it: a host takes their items only when it lists them too",
                names.join(", ")
            ));
        }
        done.section(&tpl.template, &head, &tpl.items, &macros, false);
        for rule in &tpl.discovery_rules {
            let name = format!("{}: {}", tpl.template, rule.name);
            let first = rule.item_prototypes.iter().map(|p| p.key.as_str()).next();
            let head = [
                format!(
                    "Zabbix's discovery rule {:?} ({}) finds the rows of these items; netpoller",
                    rule.name, rule.key
                ),
                format!(
                    "polls the rows a host lists: items = [ {{ key = {:?}, indices = \"1-48\" }}, ... ]",
                    first.unwrap_or_default()
                ),
            ];
            let mut part = Imported::default();
            part.section(&name, &head, &rule.item_prototypes, &macros, true);
            if part.items > 0 {
                done.rules += 1;
                done.toml.push_str(&part.toml);
            } else {
                done.not_rules += 1;
                done.skipped.push(format!(
                    "{}: discovery rule {:?} ({}): none of its {} item prototypes can be polled",
                    tpl.template,
                    rule.name,
                    rule.key,
                    rule.item_prototypes.len()
                ));
            }
            done.items += part.items;
            done.not_items += part.not_items;
            done.skipped.extend(part.skipped);
        }
    }
    done
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let export: Export = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a Zabbix template export in JSON (Zabbix 6.0+: Export → JSON)",
            args.file.display()
        )
    })?;
    let export = export.zabbix_export;
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
        "{} items imported ({} discovery rules as templates of items per table row); not imported: {} items, {} discovery rules",
        done.items, done.rules, done.not_items, done.not_rules
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
        serde_json::from_str::<Export>(EXPORT)
            .unwrap()
            .zabbix_export
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
        } = convert(&export(), &[], "export.json");
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
        // ICMP: Zabbix's defaults (1m, the key's type); a template macro resolved.
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
            toml.contains("# Zabbix links ICMP Ping to it"),
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
    fn one_template_can_be_picked() {
        let only = convert(&export(), &["ICMP Ping".into()], "x");
        assert_eq!((only.items, only.skipped.len(), only.rules), (3, 1, 0));
        assert!(!only.toml.contains("SNMP"), "{}", only.toml);
    }

    #[test]
    fn macros_and_intervals_read_as_zabbix_writes_them() {
        let m: HashMap<&str, &str> = [("{$A}", "1"), ("{$B:\"x\"}", "ctx"), ("{$B}", "plain")]
            .into_iter()
            .collect();
        assert_eq!(resolve("a{$A}b{$A}", &m).unwrap(), "a1b1");
        assert_eq!(resolve("{$B:\"x\"}/{$B:\"y\"}", &m).unwrap(), "ctx/plain");
        assert_eq!(resolve("no macro {#LLD}", &m).unwrap(), "no macro {#LLD}");
        assert!(resolve("{$C}", &m).unwrap_err().contains("{$C}"));
        assert_eq!(interval("90").unwrap(), "90s");
        assert_eq!(interval("5m;10s/1-5,09:00-18:00").unwrap(), "5m");
        assert!(interval("0;10s/1-5,09:00-18:00").is_err());
    }
}
