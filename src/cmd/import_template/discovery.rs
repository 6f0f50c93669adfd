//! A Zabbix discovery rule as a netpoller `discovery` rule: which column's rows, how
//! often, and the filter conditions one condition per column can say (the others are
//! listed with why). Every rule written is checked by the config loader.
//!
//! Zabbix's rows come from a rule's `discovery[{#MACRO},OID,...]` key (Zabbix ≤ 6.2),
//! or from an `SNMP_WALK_TO_JSON` step (6.4+: the rule's own, on its `walk[]` key, or
//! on its master `walk[]` item's value). Its filter compares the rows' macros:
//! `AND_OR` (the default) "or"s the conditions of one macro and "and"s macros, `AND`
//! "and"s all, `OR` "or"s all, `FORMULA` is an expression. netpoller's conditions all
//! hold, one per column, each a match and an exclusion.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::{interval, key_params, q, resolve, walk_columns, FilterCondition, Item, Macros, Rule};

/// What [`discovery_rule`] made of a rule.
pub(super) struct RuleOut {
    /// The inline table.
    pub toml: String,
    /// What of its filter was left out, with why.
    pub left: Vec<String>,
    /// How netpoller walks it otherwise than Zabbix reads it (the interval).
    pub remark: Option<String>,
}

/// A discovery rule as netpoller's (`discovery = [ ... ]` of its template, named
/// `name`): the column whose rows it walks, its interval and the filter conditions
/// netpoller can run. Returns the inline table and what of the filter was left out
/// (each with why); `Err`: why the rule cannot be walked by netpoller (a host then
/// lists its rows).
pub(super) fn discovery_rule(
    rule: &Rule,
    name: &str,
    macros: &Macros,
    masters: &HashMap<&str, &Item>,
) -> Result<RuleOut, String> {
    // The rule's columns, how often Zabbix reads them, and whether that is a walk's
    // interval (which also feeds Zabbix's items: here they are GETs of their own).
    let (pairs, delay, walked): (Vec<Column>, &str, bool) = match rule.kind.as_str() {
        "SNMP_AGENT" => {
            let oid = resolve(rule.snmp_oid.as_deref().unwrap_or_default(), macros)?;
            let oid = oid.trim();
            let pairs = match oid
                .strip_prefix("discovery[")
                .and_then(|o| o.strip_suffix(']'))
            {
                // Zabbix 7: the rule walks itself, its first step makes the rows.
                _ if oid.starts_with("walk[") => walk_to_json(rule, macros)?,
                Some(_) => {
                    let p = key_params(oid)?;
                    if !p.len().is_multiple_of(2) {
                        return Err(format!("{oid:?} does not pair each macro with an OID"));
                    }
                    p.chunks(2)
                        .map(|c| Column {
                            name: c[0].clone(),
                            oid: c[1].clone(),
                            format: "0".into(),
                        })
                        .collect()
                }
                // Before discovery[]: one OID walked, its value {#SNMPVALUE}.
                None => vec![Column {
                    name: "{#SNMPVALUE}".into(),
                    oid: oid.trim_start_matches('.').to_owned(),
                    format: "0".into(),
                }],
            };
            // A rule's default interval in Zabbix.
            (pairs, rule.delay.as_deref().unwrap_or("1h"), false)
        }
        "DEPENDENT" => {
            let key = rule.master_item.as_ref().map_or("", |m| m.key.as_str());
            let master = masters
                .get(key)
                .ok_or_else(|| format!("its master {key:?} is not an item of this template"))?;
            walk_columns(master, macros)??;
            let pairs = walk_to_json(rule, macros)?;
            // An item's default interval in Zabbix.
            (pairs, master.delay.as_deref().unwrap_or("1m"), true)
        }
        other => return Err(format!("its type is {other} (netpoller walks SNMP tables)")),
    };
    let rows = &pairs[0].oid;
    // Zabbix reads it at the rule's interval; a walk's, when the rule depends on one,
    // at least an hour here: that walk also reads Zabbix's items every few minutes,
    // where netpoller's items are GETs of their own and the walk would only look for
    // new rows. At least a minute, at most a week.
    let every = interval(&resolve(delay, macros)?)?;
    let floor = if walked { 3600 } else { 60 };
    let (every, slower) = match sink::config::parse_duration(&every) {
        Ok(d) if d < Duration::from_secs(floor) => {
            let to = if walked { "1h" } else { "1m" };
            (to.to_owned(), walked.then(|| format!("Zabbix reads its rows every {every}, with the walk that feeds its items; netpoller walks them every {to} (set `interval` to walk more often)")))
        }
        Ok(d) if d > Duration::from_secs(7 * 86_400) => ("7d".to_owned(), None),
        _ => (every, None),
    };
    let mut left: Vec<String> = Vec::new();
    let conditions = rule.filter.as_ref().map_or(&[][..], |f| &f.conditions[..]);
    let mut evaltype = rule
        .filter
        .as_ref()
        .and_then(|f| f.evaltype.as_deref())
        .unwrap_or("AND_OR");
    // The macros of the conditions, in order.
    let mut names: Vec<&str> = Vec::new();
    for c in conditions {
        if !names.contains(&c.name.as_str()) {
            names.push(&c.name);
        }
    }
    // "or" of one macro's conditions is AND_OR's.
    if evaltype == "OR" && names.len() == 1 {
        evaltype = "AND_OR";
    }
    // The conditions on the rule's own column, and on others.
    let (mut own, mut filter) = (None, Vec::new());
    match evaltype {
        _ if conditions.is_empty() => {}
        "OR" => left.push(format!(
            "its filter's {} conditions on {} macros are \"or\"ed (netpoller's all hold): none applied",
            conditions.len(),
            names.len()
        )),
        "FORMULA" => left.push("its filter is a custom formula: not applied".into()),
        _ => {
            for m in names {
                let of_macro: Vec<&FilterCondition> =
                    conditions.iter().filter(|c| c.name == m).collect();
                let Some(col) = pairs.iter().find(|c| c.name == m) else {
                    left.push(format!(
                        "its filter on {m}, which no walked column gives: not applied"
                    ));
                    continue;
                };
                if col.format != "0" {
                    left.push(format!(
                        "its filter on {m}, whose values Zabbix converts (SNMP_WALK_TO_JSON format {:?}; netpoller compares them as the agent gives them): not applied",
                        col.format
                    ));
                    continue;
                }
                match filter_condition(m, &of_macro, evaltype, macros) {
                    Ok(c) if col.oid == *rows && own.is_none() => own = Some(c),
                    Ok(c) => filter.push(format!("{{ oid = {}{} }}", q(&col.oid), c)),
                    Err(why) => left.push(why),
                }
            }
        }
    }
    let mut t = format!("{{ name = {}, oid = {}", q(name), q(rows));
    t.push_str(&own.unwrap_or_default());
    write!(t, ", interval = {}", q(&every)).expect("to a String");
    if !filter.is_empty() {
        write!(t, ", filter = [{}]", filter.join(", ")).expect("to a String");
    }
    t.push_str(" }");
    // The loader decides, as for items.
    let probe = format!("[[templates]]\nname = \"probe\"\ndiscovery = [ {t} ]\n");
    crate::config::parse(&probe).map_err(|errors| {
        errors.first().map_or_else(
            || "refused by the config loader".into(),
            |e| e.message.clone(),
        )
    })?;
    Ok(RuleOut {
        toml: t,
        left,
        remark: slower,
    })
}

/// A rule's macro, the column it comes from, and Zabbix's format of its values (`0`:
/// as the agent gives them; 1–3: UTF-8, MAC, BITS).
struct Column {
    name: String,
    oid: String,
    format: String,
}

/// The macros and columns of a rule's first step, `SNMP_WALK_TO_JSON` (macro, OID,
/// format, ...).
fn walk_to_json(rule: &Rule, macros: &Macros) -> Result<Vec<Column>, String> {
    let Some(step) = rule
        .preprocessing
        .first()
        .filter(|s| s.kind == "SNMP_WALK_TO_JSON")
    else {
        return Err("its first step is not SNMP_WALK_TO_JSON".into());
    };
    let params = step.params();
    if !params.len().is_multiple_of(3) || params.is_empty() {
        return Err("its SNMP_WALK_TO_JSON step does not list macro, OID, format".into());
    }
    params
        .chunks(3)
        .map(|c| {
            let oid = resolve(c[1], macros)?;
            Ok(Column {
                name: c[0].trim().to_owned(),
                oid: oid.trim().trim_start_matches('.').to_owned(),
                format: c[2].trim().to_owned(),
            })
        })
        .collect()
}

/// The `, matches = ..., not_matches = ...` of one netpoller condition for the
/// conditions of one macro `m` (several: "or"ed under `AND_OR`, "and"ed under `AND`),
/// or why they are left out.
fn filter_condition(
    m: &str,
    conditions: &[&FilterCondition],
    evaltype: &str,
    macros: &Macros,
) -> Result<String, String> {
    let mut matches = Vec::new();
    let mut not_matches = Vec::new();
    // EXISTS: netpoller's conditions fail on a row without a value in their column.
    let mut exists = false;
    for c in conditions {
        match c.operator.as_deref() {
            Some("EXISTS") => {
                exists = true;
                continue;
            }
            Some("NOT_EXISTS") => {
                return Err(format!(
                    "its filter on {m} (NOT_EXISTS: a row without it): not applied"
                ))
            }
            _ => {}
        }
        let value = resolve(&c.value, macros)
            .map_err(|e| format!("its filter on {m}: {e}: not applied"))?;
        if value.starts_with('@') {
            return Err(format!(
                "its filter on {m} uses the global regular expression {value:?}: not applied"
            ));
        }
        if let Err(e) = regex::Regex::new(&value) {
            return Err(format!("its filter on {m}: {value:?} is not a regular expression netpoller reads ({e}): not applied").replace('\n', " "));
        }
        match c.operator.as_deref().unwrap_or("MATCHES_REGEX") {
            "MATCHES_REGEX" => matches.push(value),
            "NOT_MATCHES_REGEX" => not_matches.push(value),
            other => return Err(format!("its filter on {m} ({other}): not applied")),
        }
    }
    // Several regexes as one that matches when any does.
    let any = |v: &[String]| -> Option<String> {
        match v {
            [] => None,
            [one] => Some(one.clone()),
            many => Some(
                many.iter()
                    .map(|r| format!("(?:{r})"))
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
        }
    };
    // A value exists: "or"ed, any value passes (whatever else); "and"ed, any other
    // condition says it.
    match evaltype {
        "AND_OR" if exists => (matches, not_matches) = (vec![String::new()], Vec::new()),
        _ if exists && matches.is_empty() && not_matches.is_empty() => matches.push(String::new()),
        _ => {}
    }
    let (matches, not_matches) = match evaltype {
        // One macro's conditions "or"ed: matches any, or (one) exclusion.
        "AND_OR" if not_matches.is_empty() => (any(&matches), None),
        "AND_OR" if matches.is_empty() && not_matches.len() == 1 => (None, any(&not_matches)),
        // "and"ed: one match, and none of the exclusions.
        "AND" if matches.len() <= 1 => (any(&matches), any(&not_matches)),
        _ => {
            return Err(format!(
            "its filter's {} conditions on {m} are not one match and one exclusion: not applied",
            conditions.len()
        ))
        }
    };
    let mut t = String::new();
    if let Some(r) = matches {
        write!(t, ", matches = {}", q(&r)).expect("to a String");
    }
    if let Some(r) = not_matches {
        write!(t, ", not_matches = {}", q(&r)).expect("to a String");
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::super::Macro;
    use super::*;

    /// A Zabbix discovery rule as netpoller's: (inline table, what was left out), or
    /// why not. `master`: the template's walk item (for a DEPENDENT rule).
    fn rule_of(rule: serde_json::Value) -> Result<(String, Vec<String>), String> {
        rule_out(rule).map(|r| (r.toml, r.left))
    }

    fn rule_out(rule: serde_json::Value) -> Result<RuleOut, String> {
        let master: Item = serde_json::from_value(serde_json::json!({
            "name": "w", "type": "SNMP_AGENT", "key": "if.walk",
            "snmp_oid": "walk[1.3.6.1.2.1.2.2.1.2,1.3.6.1.2.1.2.2.1.8]", "delay": "{$WALK}"}))
        .unwrap();
        let masters: HashMap<&str, &Item> = [("if.walk", &master)].into();
        let macros = Macros::new(&[
            Macro {
                name: "{$WALK}".into(),
                value: "5m".into(),
                kind: None,
            },
            Macro {
                name: "{$NAME.NOT}".into(),
                value: "^(lo|Nu)".into(),
                kind: None,
            },
        ]);
        let mut rule = rule;
        rule["name"] = "If".into();
        rule["key"] = "if.discovery".into();
        let rule: Rule = serde_json::from_value(rule).unwrap();
        discovery_rule(&rule, "T: If", &macros, &masters)
    }

    fn dependent(filter: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"type": "DEPENDENT", "master_item": {"key": "if.walk"},
            "preprocessing": [{"type": "SNMP_WALK_TO_JSON", "parameters":
                ["{#IFDESCR}", ".1.3.6.1.2.1.2.2.1.2", "0", "{#IFOPER}", "1.3.6.1.2.1.2.2.1.8", "0"]}],
            "filter": filter})
    }

    #[test]
    fn discovery_rules_become_rules_netpoller_walks() {
        let cond = |m: &str, v: &str, op: Option<&str>| {
            let mut c = serde_json::json!({"macro": m, "value": v});
            if let Some(op) = op {
                c["operator"] = op.into();
            }
            c
        };
        // Zabbix 6.4+: the first column's rows, its conditions the rule's own; AND_OR
        // (the default) "or"s one macro's matches; a template macro's value is the
        // regex. The walk's interval (a macro: 5m) is an hour at least, and said so.
        let r = rule_out(dependent(serde_json::json!({"conditions": [
            cond("{#IFDESCR}", "{$NAME.NOT}", Some("NOT_MATCHES_REGEX")),
            cond("{#IFOPER}", "^1$", None),
            cond("{#IFOPER}", "^5$", None),
        ]})))
        .unwrap();
        assert_eq!(
            r.toml,
            r#"{ name = "T: If", oid = "1.3.6.1.2.1.2.2.1.2", not_matches = "^(lo|Nu)", interval = "1h", filter = [{ oid = "1.3.6.1.2.1.2.2.1.8", matches = "(?:^1$)|(?:^5$)" }] }"#
        );
        assert!(r.left.is_empty(), "{:?}", r.left);
        assert!(r.remark.is_some_and(|m| m.contains("every 5m")));
        // AND: one match and any exclusions of a macro; EXISTS is what a condition needs.
        let (t, _) = rule_of(dependent(
            serde_json::json!({"evaltype": "AND", "conditions": [
                cond("{#IFDESCR}", "^Gi", None),
                cond("{#IFDESCR}", "\\.", Some("NOT_MATCHES_REGEX")),
                cond("{#IFDESCR}", "^x", Some("NOT_MATCHES_REGEX")),
                cond("{#IFOPER}", "", Some("EXISTS")),
            ]}),
        ))
        .unwrap();
        assert!(
            t.contains(r#"oid = "1.3.6.1.2.1.2.2.1.2", matches = "^Gi", not_matches = '(?:\.)|(?:^x)', interval = "1h", filter = [{ oid = "1.3.6.1.2.1.2.2.1.8", matches = "" }]"#),
            "{t}"
        );
        // One macro's conditions under OR are AND_OR's; with EXISTS, any value.
        for (evaltype, conds, want) in [
            (
                "OR",
                vec![cond("{#IFOPER}", "^1$", None)],
                r#"filter = [{ oid = "1.3.6.1.2.1.2.2.1.8", matches = "^1$" }]"#,
            ),
            (
                "OR",
                vec![
                    cond("{#IFOPER}", "^1$", None),
                    cond("{#IFOPER}", "^2$", None),
                ],
                r#"matches = "(?:^1$)|(?:^2$)""#,
            ),
            (
                "AND_OR",
                vec![
                    cond("{#IFOPER}", "", Some("EXISTS")),
                    cond("{#IFOPER}", "^2$", Some("NOT_MATCHES_REGEX")),
                ],
                r#"filter = [{ oid = "1.3.6.1.2.1.2.2.1.8", matches = "" }]"#,
            ),
        ] {
            let (t, left) = rule_of(dependent(
                serde_json::json!({"evaltype": evaltype, "conditions": conds}),
            ))
            .unwrap();
            assert!(
                t.contains(want) && left.is_empty(),
                "{evaltype}: {t} {left:?}"
            );
        }
        // Values Zabbix converts (format 1-3) are not what netpoller compares.
        let mut mac =
            dependent(serde_json::json!({"conditions": [cond("{#IFOPER}", "^1$", None)]}));
        mac["preprocessing"][0]["parameters"][5] = "2".into();
        let (t, left) = rule_of(mac).unwrap();
        assert!(
            !t.contains("filter") && left[0].contains("format \"2\""),
            "{t} {left:?}"
        );
        // What one condition per column cannot say is left out, with why; the rest
        // of the filter stays.
        for (filter, why) in [
            (
                serde_json::json!({"evaltype": "OR", "conditions": [cond("{#IFDESCR}", "a", None), cond("{#IFOPER}", "1", None)]}),
                "\"or\"ed",
            ),
            (
                serde_json::json!({"evaltype": "FORMULA", "formula": "A", "conditions": [cond("{#IFDESCR}", "a", None)]}),
                "custom formula",
            ),
            (
                serde_json::json!({"conditions": [cond("{#IFALIAS}", "a", None)]}),
                "no walked column gives",
            ),
            (
                serde_json::json!({"conditions": [cond("{#IFDESCR}", "@Interfaces", None)]}),
                "global regular expression",
            ),
            (
                serde_json::json!({"conditions": [cond("{#IFDESCR}", "(?!lo)", None)]}),
                "not a regular expression netpoller reads",
            ),
            (
                serde_json::json!({"conditions": [cond("{#IFDESCR}", "a", Some("NOT_EXISTS"))]}),
                "NOT_EXISTS",
            ),
            (
                serde_json::json!({"conditions": [cond("{#IFDESCR}", "{$NONE}", None)]}),
                "{$NONE}",
            ),
            (
                serde_json::json!({"evaltype": "AND", "conditions": [cond("{#IFDESCR}", "a", None), cond("{#IFDESCR}", "b", None)]}),
                "not one match",
            ),
            (
                serde_json::json!({"conditions": [cond("{#IFDESCR}", "a", Some("NOT_MATCHES_REGEX")), cond("{#IFDESCR}", "b", Some("NOT_MATCHES_REGEX"))]}),
                "not one match",
            ),
        ] {
            let (t, left) = rule_of(dependent(filter)).unwrap();
            assert!(left.len() == 1 && left[0].contains(why), "{why}: {left:?}");
            assert!(
                !t.contains("{#") && !t.contains("{$"),
                "no macro is written: {t}"
            );
        }
        // Before 6.4: the rule's own discovery[] key and interval (Zabbix's rule default
        // 1h when the export leaves it out); before discovery[], one OID's values.
        let agent = |oid: &str, delay: Option<&str>| {
            let mut r = serde_json::json!({"type": "SNMP_AGENT", "snmp_oid": oid,
                "filter": {"conditions": [cond("{#IFTYPE}", "^6$", None)]}});
            if let Some(d) = delay {
                r["delay"] = d.into();
            }
            r
        };
        let (t, left) = rule_of(agent(
            "discovery[{#IFDESCR},1.3.6.1.2.1.2.2.1.2,{#IFTYPE},.1.3.6.1.2.1.2.2.1.3]",
            None,
        ))
        .unwrap();
        assert_eq!(
            t,
            r#"{ name = "T: If", oid = "1.3.6.1.2.1.2.2.1.2", interval = "1h", filter = [{ oid = "1.3.6.1.2.1.2.2.1.3", matches = "^6$" }] }"#
        );
        assert!(left.is_empty());
        let (t, _) = rule_of(agent(".1.3.6.1.2.1.2.2.1.2", Some("30s"))).unwrap();
        assert!(
            t.starts_with(r#"{ name = "T: If", oid = "1.3.6.1.2.1.2.2.1.2", interval = "1m""#),
            "at least a minute: {t}"
        );
        // Zabbix 7: an SNMP rule that walks itself, its first step making the rows.
        let mut own = agent("walk[1.3.6.1.2.1.2.2.1.2,1.3.6.1.2.1.2.2.1.3]", Some("2h"));
        own["preprocessing"] = serde_json::json!([{"type": "SNMP_WALK_TO_JSON",
            "parameters": ["{#IFDESCR}", "1.3.6.1.2.1.2.2.1.2", "0", "{#IFTYPE}", "1.3.6.1.2.1.2.2.1.3", "0"]}]);
        let (t, _) = rule_of(own).unwrap();
        assert_eq!(
            t,
            r#"{ name = "T: If", oid = "1.3.6.1.2.1.2.2.1.2", interval = "2h", filter = [{ oid = "1.3.6.1.2.1.2.2.1.3", matches = "^6$" }] }"#
        );
        // Rules netpoller cannot walk say why (their template's hosts list their rows).
        for (rule, why) in [
            (
                agent("discovery[{#A},1.3.6.1.2.1.2.2.1.2,{#B}]", None),
                "does not pair",
            ),
            (
                serde_json::json!({"type": "ZABBIX_PASSIVE"}),
                "its type is ZABBIX_PASSIVE",
            ),
            (
                serde_json::json!({"type": "DEPENDENT", "master_item": {"key": "nope"}}),
                "not an item of this template",
            ),
            (
                serde_json::json!({"type": "DEPENDENT", "master_item": {"key": "if.walk"}}),
                "not SNMP_WALK_TO_JSON",
            ),
            (
                agent("discovery[{#A},IF-MIB::ifDescr]", None),
                "not a numeric OID",
            ),
        ] {
            let e = rule_of(rule).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
    }
}
