//! Reading the group fields out of a group event's info (`GROUP_INVITED`,
//! `GROUP_CONSTRUCT_COMPLETE`, `GROUP_LEADER_SELECTED`, …) without matching on
//! `Value`s by hand.

use cohort_proto::event::{keys, Event};
use cohort_proto::value::info_get;
use cohort_proto::{ContextId, Info, ProcId, Value};

/// The well-known group keys of an event's info; a field is `None` when the event
/// does not carry that key (or carries it with another type).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupEventInfo {
    /// `keys::GROUP_ID`.
    pub id: Option<String>,
    /// `keys::GROUP_LEADER`: the (new) leader of the construct.
    pub leader: Option<ProcId>,
    /// `keys::GROUP_MEMBERSHIP`: the invited processes in `GROUP_INVITED`, the final
    /// membership in `GROUP_CONSTRUCT_COMPLETE`.
    pub membership: Option<Vec<ProcId>>,
    /// `keys::GROUP_CONTEXT_ID`, when one was assigned.
    pub context_id: Option<ContextId>,
}

impl GroupEventInfo {
    pub fn of(event: &Event) -> GroupEventInfo {
        Self::from_info(&event.info)
    }

    pub fn from_info(info: &Info) -> GroupEventInfo {
        let procs = |key| match info_get(info, key) {
            Some(Value::Procs(p)) => Some(p.clone()),
            _ => None,
        };
        GroupEventInfo {
            id: info_get(info, keys::GROUP_ID)
                .and_then(Value::as_str)
                .map(String::from),
            // A single proc, sent as a one-element list (PMIx passes a proc array).
            leader: procs(keys::GROUP_LEADER).and_then(|p| p.into_iter().next()),
            membership: procs(keys::GROUP_MEMBERSHIP),
            context_id: info_get(info, keys::GROUP_CONTEXT_ID).and_then(Value::as_u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_group_keys_and_ignores_the_rest() {
        let leader = ProcId::new("job", 0);
        let members = vec![ProcId::new("job", 1), ProcId::new("job", 2)];
        let info: Info = vec![
            ("other".into(), Value::U32(1)),
            (keys::GROUP_ID.into(), Value::Str("g".into())),
            (
                keys::GROUP_LEADER.into(),
                Value::Procs(vec![leader.clone()]),
            ),
            (keys::GROUP_MEMBERSHIP.into(), Value::Procs(members.clone())),
            (keys::GROUP_CONTEXT_ID.into(), Value::U64(7 << 16)),
        ];
        let got = GroupEventInfo::from_info(&info);
        assert_eq!(
            got,
            GroupEventInfo {
                id: Some("g".into()),
                leader: Some(leader),
                membership: Some(members),
                context_id: Some(7 << 16),
            }
        );
        assert_eq!(
            GroupEventInfo::from_info(&vec![]),
            GroupEventInfo::default()
        );
        // A wrongly typed value reads as absent rather than panicking.
        let odd: Info = vec![(keys::GROUP_ID.into(), Value::U32(3))];
        assert_eq!(GroupEventInfo::from_info(&odd).id, None);
    }
}
