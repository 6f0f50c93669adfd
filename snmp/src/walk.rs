//! Subtree walk, sans-IO: GETBULK for v2c, GETNEXT for v1, one request at a time.
//!
//! Invariants: the walk only ever yields OIDs inside the root's subtree, in strictly
//! increasing order; it stops at endOfMibView, at the first OID outside the subtree, at
//! v1's noSuchName, or with [`WalkError::NotIncreasing`] when an agent loops (so a
//! broken agent cannot keep it busy forever); an answer without varbinds fails it
//! ([`WalkError::NoVarbinds`]: it says nothing of where the subtree ends). The
//! varbinds of a response before its first non-increasing OID are valid and delivered
//! before that error, as net-snmp's walks print them before "OID not increasing". A
//! GETBULK answered tooBig is asked again from the same OID for half as many
//! repetitions (down to one). Only a Response with the outstanding request-id, in the
//! walk's SNMP version, is taken ([`Walk::matches`]).

use crate::message::{encode_request, ErrorStatus, Message, PduType, RequestKind, Version};
use crate::oid::Oid;
use crate::value::{ValueRef, VarValue};

/// Why a walk ended early.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    #[error("agent returned OID {got} which does not follow {after} (agent loops)")]
    NotIncreasing { got: Oid, after: Oid },
    #[error("agent returned error-status {status} (index {index})")]
    ErrorStatus { status: ErrorStatus, index: u32 },
    #[error(
        "response is not a Response PDU, has the wrong request-id or is of another SNMP version"
    )]
    Unexpected,
    /// An answer of no varbinds and no error: not the subtree's end (that is an OID
    /// past it, or endOfMibView), but an agent that cut its answer to nothing (RFC 3416
    /// lets a GETBULK answer drop varbinds from its end to fit a size limit). What
    /// comes after is unknown.
    #[error("agent answered with no varbinds and no error (an answer cut to nothing): the rest of the subtree is unknown")]
    NoVarbinds,
}

/// State of one walk.
#[derive(Debug, Clone)]
pub struct Walk {
    root: Oid,
    /// Set for a single-arc root such as `.1` (an OID needs two arcs on the wire): the
    /// walk starts at `<arc>.0` and the subtree test compares the first arc only.
    top_arc: Option<u32>,
    version: Version,
    max_repetitions: u32,
    last: Oid,
    done: bool,
    request_id: Option<i32>,
}

impl Walk {
    /// `max_repetitions` is used for v2c GETBULK (net-snmp's default is 10).
    pub fn new(root: Oid, version: Version, max_repetitions: u32) -> Walk {
        Walk {
            last: root.clone(),
            root,
            top_arc: None,
            version,
            max_repetitions: max_repetitions.max(1),
            done: false,
            request_id: None,
        }
    }

    /// A walk of everything under a single top arc (`.1` walks the whole MIB), which
    /// [`Oid`] cannot hold. `arc` must be 0, 1 or 2.
    pub fn new_top(arc: u32, version: Version, max_repetitions: u32) -> Option<Walk> {
        let start = Oid::from_arcs(&[arc, 0]).ok()?;
        let mut w = Walk::new(start, version, max_repetitions);
        w.top_arc = Some(arc);
        Some(w)
    }

    fn in_subtree(&self, oid: &crate::oid::OidRef<'_>) -> bool {
        match self.top_arc {
            Some(a) => oid.arcs().next() == Some(a),
            None => oid.starts_with(&self.root),
        }
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The next request's kind, now outstanding as `request_id`.
    fn next_kind(&mut self, request_id: i32) -> RequestKind {
        self.request_id = Some(request_id);
        self.kind()
    }

    /// The kind of the next (or outstanding) request.
    fn kind(&self) -> RequestKind {
        match self.version {
            Version::V1 => RequestKind::GetNext,
            Version::V2c | Version::V3 => RequestKind::GetBulk {
                non_repeaters: 0,
                max_repetitions: self.max_repetitions,
            },
        }
    }

    /// Writes the next v1/v2c request (appending to `out`).
    pub fn next_request(&mut self, out: &mut Vec<u8>, community: &[u8], request_id: i32) {
        let kind = self.next_kind(request_id);
        encode_request(
            out,
            self.version,
            community,
            request_id,
            kind,
            std::iter::once(&self.last),
        );
    }

    /// Writes the next SNMPv3 request to `engine` (appending to `out`); `None` only if
    /// the engine's privacy key does not fit its cipher.
    pub fn next_request_v3(
        &mut self,
        out: &mut Vec<u8>,
        engine: &crate::v3::Engine,
        salt: &mut u64,
        now: std::time::Instant,
        request_id: i32,
    ) -> Option<usize> {
        self.next_kind(request_id);
        self.resend_v3(out, engine, salt, now, request_id)
    }

    /// Writes the outstanding SNMPv3 request (appending to `out`) under `msg_id`: again,
    /// under a new one (RFC 3412 §6.2: an agent may drop a msgID it has seen), with the
    /// engine's clock now; its request-id stays, so that the answer to any attempt
    /// [`matches`](Self::matches). `None` if nothing is outstanding, or as
    /// [`Self::next_request_v3`].
    pub fn resend_v3(
        &self,
        out: &mut Vec<u8>,
        engine: &crate::v3::Engine,
        salt: &mut u64,
        now: std::time::Instant,
        msg_id: i32,
    ) -> Option<usize> {
        crate::v3::encode_request(
            out,
            engine,
            salt,
            now,
            (msg_id, self.request_id?),
            self.kind(),
            std::iter::once(&self.last),
        )
    }

    /// True when `msg` answers the outstanding request: a Response with its request-id,
    /// in the walk's SNMP version (an SNMPv3 ScopedPDU's is v3). The caller checks the
    /// source and the community (or, v3, the USM), as the engine does.
    pub fn matches(&self, msg: &Message<'_>) -> bool {
        msg.pdu_type == PduType::Response
            && Some(msg.request_id) == self.request_id
            && msg.version == self.version
    }

    /// Consumes a response, appending its varbinds inside the subtree to `out`, in
    /// order. On [`WalkError::NotIncreasing`] the varbinds before the offending one
    /// have been appended (they are the walk's: the error ends it after them); on the
    /// other errors nothing is.
    pub fn handle_response(
        &mut self,
        msg: &Message<'_>,
        out: &mut Vec<(Oid, VarValue)>,
    ) -> Result<(), WalkError> {
        if !self.matches(msg) {
            return Err(WalkError::Unexpected);
        }
        self.request_id = None;
        if msg.error_status == ErrorStatus::TOO_BIG
            && self.version != Version::V1
            && self.max_repetitions > 1
        {
            // An agent that says tooBig to a GETBULK instead of returning what fits
            // (RFC 3416 §4.2.3 asks for the latter; some do this): ask again from the
            // same OID for half as many, as Zabbix's walk does.
            self.max_repetitions /= 2;
            return Ok(());
        }
        if msg.error_status != ErrorStatus::NO_ERROR {
            self.done = true;
            if msg.error_status == ErrorStatus::NO_SUCH_NAME && self.version == Version::V1 {
                return Ok(()); // v1's end of MIB
            }
            return Err(WalkError::ErrorStatus {
                status: msg.error_status,
                index: msg.error_index,
            });
        }
        if msg.varbind_count() == 0 {
            self.done = true;
            return Err(WalkError::NoVarbinds);
        }
        for vb in msg.varbinds() {
            if vb.value == ValueRef::EndOfMibView || !self.in_subtree(&vb.oid) {
                self.done = true;
                return Ok(());
            }
            let oid = vb.oid.to_owned();
            if oid <= self.last {
                self.done = true;
                return Err(WalkError::NotIncreasing {
                    got: oid,
                    after: self.last.clone(),
                });
            }
            self.last = oid.clone();
            out.push((oid, vb.value.to_owned()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::encode_message;

    fn respond(req: &[u8], vbs: &[(&str, VarValue)], status: u32) -> Vec<u8> {
        let m = Message::decode(req).unwrap();
        let vbs: Vec<(Oid, VarValue)> = vbs
            .iter()
            .map(|(o, v)| (o.parse().unwrap(), v.clone()))
            .collect();
        let mut out = Vec::new();
        encode_message(
            &mut out,
            m.version,
            m.community,
            PduType::Response,
            m.request_id,
            status as i64,
            1,
            vbs.iter().map(|(o, v)| (o.as_ref(), v.as_ref())),
        );
        out
    }

    /// The varbinds `w` takes from the response `resp`, and how it ended.
    fn take(w: &mut Walk, resp: &[u8]) -> (Vec<(Oid, VarValue)>, Result<(), WalkError>) {
        let mut got = Vec::new();
        let r = w.handle_response(&Message::decode(resp).unwrap(), &mut got);
        (got, r)
    }

    #[test]
    fn bulk_walk_stops_at_subtree_end() {
        let mut w = Walk::new("1.3.6.1.2.1.2.2.1.2".parse().unwrap(), Version::V2c, 3);
        let mut req = Vec::new();
        w.next_request(&mut req, b"public", 7);
        let m = Message::decode(&req).unwrap();
        assert_eq!(m.pdu_type, PduType::GetBulkRequest);
        assert_eq!((m.error_status.0, m.error_index), (0, 3));
        let resp = respond(
            &req,
            &[
                (
                    "1.3.6.1.2.1.2.2.1.2.1",
                    VarValue::OctetString(b"lo".to_vec()),
                ),
                (
                    "1.3.6.1.2.1.2.2.1.2.2",
                    VarValue::OctetString(b"eth0".to_vec()),
                ),
                ("1.3.6.1.2.1.2.2.1.3.1", VarValue::Integer(24)),
            ],
            0,
        );
        let (got, r) = take(&mut w, &resp);
        assert_eq!((got.len(), r), (2, Ok(())));
        assert!(w.is_done());
    }

    #[test]
    fn v1_next_walk_continues_then_ends_on_no_such_name() {
        let mut w = Walk::new("1.3.6.1.2.1.1".parse().unwrap(), Version::V1, 10);
        let mut req = Vec::new();
        w.next_request(&mut req, b"public", 1);
        assert_eq!(
            Message::decode(&req).unwrap().pdu_type,
            PduType::GetNextRequest
        );
        let resp = respond(
            &req,
            &[("1.3.6.1.2.1.1.1.0", VarValue::OctetString(b"x".to_vec()))],
            0,
        );
        let (got, r) = take(&mut w, &resp);
        assert_eq!((got.len(), r), (1, Ok(())));
        assert!(!w.is_done());
        req.clear();
        w.next_request(&mut req, b"public", 2);
        let m = Message::decode(&req).unwrap();
        assert_eq!(
            m.varbinds().next().unwrap().oid.to_string(),
            ".1.3.6.1.2.1.1.1.0"
        );
        let resp = respond(&req, &[("1.3.6.1.2.1.1.1.0", VarValue::Null)], 2);
        assert_eq!(take(&mut w, &resp), (vec![], Ok(())));
        assert!(w.is_done());
    }

    #[test]
    fn looping_agent_is_an_error_and_stale_answers_are_rejected() {
        let mut w = Walk::new("1.3.6.1.2.1.1".parse().unwrap(), Version::V2c, 2);
        let mut req = Vec::new();
        w.next_request(&mut req, b"public", 1);
        let resp = respond(
            &req,
            &[
                ("1.3.6.1.2.1.1.2.0", VarValue::Integer(1)),
                ("1.3.6.1.2.1.1.1.0", VarValue::Integer(1)),
            ],
            0,
        );
        let (_, r) = take(&mut w, &resp);
        assert!(matches!(r, Err(WalkError::NotIncreasing { .. })), "{r:?}");
        assert!(w.is_done());
        assert_eq!(
            take(&mut w, &resp),
            (vec![], Err(WalkError::Unexpected)),
            "answered already"
        );
        let mut w = Walk::new("1.3.6.1.2.1.1".parse().unwrap(), Version::V2c, 2);
        w.next_request(&mut Vec::new(), b"public", 2);
        assert_eq!(
            take(&mut w, &resp),
            (vec![], Err(WalkError::Unexpected)),
            "wrong request-id"
        );
    }

    #[test]
    fn an_answer_of_another_version_is_not_the_walks() {
        // A v2c walk's request answered in v1 (and a v1 walk's in v2c), its request-id
        // and community right: not taken, as the engine drops it; the request is still
        // outstanding, and the answer in the walk's version is taken.
        for (walk, other) in [(Version::V2c, Version::V1), (Version::V1, Version::V2c)] {
            let mut w = Walk::new("1.3.6.1.2.1.1".parse().unwrap(), walk, 2);
            let mut req = Vec::new();
            w.next_request(&mut req, b"public", 1);
            let row = [("1.3.6.1.2.1.1.1.0", VarValue::Integer(1))];
            let m = Message::decode(&req).unwrap();
            let oid: Oid = row[0].0.parse().unwrap();
            let mut foreign = Vec::new();
            encode_message(
                &mut foreign,
                other,
                m.community,
                PduType::Response,
                m.request_id,
                0,
                0,
                std::iter::once((oid.as_ref(), row[0].1.as_ref())),
            );
            assert_eq!(
                take(&mut w, &foreign),
                (vec![], Err(WalkError::Unexpected)),
                "{other:?} to {walk:?}"
            );
            let (got, r) = take(&mut w, &respond(&req, &row, 0));
            assert_eq!((got.len(), r), (1, Ok(())), "{walk:?}");
        }
    }

    #[test]
    fn rows_before_a_non_increasing_oid_are_kept() {
        // A looping agent answers .1, .2, then .1 again: the first two are the walk's,
        // taken before the error (net-snmp prints them, then "OID not increasing").
        let mut w = Walk::new("1.3.6.1.2.1.1".parse().unwrap(), Version::V2c, 3);
        let mut req = Vec::new();
        w.next_request(&mut req, b"public", 1);
        let resp = respond(
            &req,
            &[
                ("1.3.6.1.2.1.1.1", VarValue::Integer(1)),
                ("1.3.6.1.2.1.1.2", VarValue::Integer(2)),
                ("1.3.6.1.2.1.1.1", VarValue::Integer(3)),
            ],
            0,
        );
        let (got, r) = take(&mut w, &resp);
        let arcs: Vec<String> = got.iter().map(|(o, _)| o.to_string()).collect();
        assert_eq!(arcs, [".1.3.6.1.2.1.1.1", ".1.3.6.1.2.1.1.2"]);
        assert_eq!(
            r,
            Err(WalkError::NotIncreasing {
                got: "1.3.6.1.2.1.1.1".parse().unwrap(),
                after: "1.3.6.1.2.1.1.2".parse().unwrap(),
            })
        );
        assert!(w.is_done());
    }

    #[test]
    fn top_arc_walk() {
        let mut w = Walk::new_top(1, Version::V2c, 2).unwrap();
        let mut req = Vec::new();
        w.next_request(&mut req, b"public", 1);
        let m = Message::decode(&req).unwrap();
        assert_eq!(m.varbinds().next().unwrap().oid.to_string(), ".1.0");
        let resp = respond(
            &req,
            &[
                ("1.0.8802.1.1.2.1.1.1.0", VarValue::Integer(30)),
                ("2.5.4", VarValue::Integer(1)),
            ],
            0,
        );
        let (got, r) = take(&mut w, &resp);
        assert_eq!((got.len(), r), (1, Ok(())));
        assert!(w.is_done());
        assert!(Walk::new_top(3, Version::V2c, 2).is_none());
    }

    #[test]
    fn a_bulk_answered_too_big_is_asked_again_for_fewer() {
        let mut w = Walk::new("1.3.6.1.2.1.2.2.1.2".parse().unwrap(), Version::V2c, 10);
        let mut req = Vec::new();
        w.next_request(&mut req, b"public", 1);
        let resp = respond(&req, &[], 1);
        assert_eq!(take(&mut w, &resp), (vec![], Ok(())));
        assert!(!w.is_done());
        for (id, reps) in [(2, 5), (3, 2), (4, 1)] {
            req.clear();
            w.next_request(&mut req, b"public", id);
            let m = Message::decode(&req).unwrap();
            assert_eq!(m.error_index, reps, "max-repetitions");
            assert_eq!(
                m.varbinds().next().unwrap().oid.to_string(),
                ".1.3.6.1.2.1.2.2.1.2",
                "from the same OID"
            );
            let resp = respond(&req, &[], 1);
            if reps > 1 {
                assert_eq!(take(&mut w, &resp), (vec![], Ok(())));
                assert!(!w.is_done());
            } else {
                // One repetition still too big: the walk fails.
                let (_, r) = take(&mut w, &resp);
                assert!(matches!(r, Err(WalkError::ErrorStatus { .. })), "{r:?}");
                assert!(w.is_done());
            }
        }
    }

    #[test]
    fn end_of_mib_view_stops() {
        let mut w = Walk::new("1.3.6.1.2.1.1".parse().unwrap(), Version::V2c, 2);
        let mut req = Vec::new();
        w.next_request(&mut req, b"public", 1);
        let resp = respond(
            &req,
            &[
                ("1.3.6.1.2.1.1.1.0", VarValue::Integer(1)),
                ("1.3.6.1.2.1.1.1.0", VarValue::EndOfMibView),
            ],
            0,
        );
        let (got, r) = take(&mut w, &resp);
        assert_eq!((got.len(), r), (1, Ok(())));
        assert!(w.is_done());
    }
}
