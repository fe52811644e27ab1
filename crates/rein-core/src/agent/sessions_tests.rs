//! The idle queue: which conversations get packed, and when.

use super::*;

fn key(s: &str) -> SessionKey {
    SessionKey::new(None, s)
}

/// Opens `name` as a call would (slot, lock, touch) and leaves it with `messages`
/// (when given) and loaded, as a call without a store does.
fn open(sessions: &Sessions, name: &str, messages: Option<Vec<Msg>>) {
    let slot = sessions.slot(&key(name));
    let mut conv = slot.try_lock().unwrap();
    sessions.touch(&slot, &mut conv);
    conv.unpack(&key(name)).unwrap();
    conv.loaded = true;
    if let Some(m) = messages {
        conv.replace(m);
    }
}

/// Opens the other sessions `o{i}` for every `i` in `range`, in order.
fn open_others(sessions: &Sessions, range: std::ops::Range<usize>) {
    for i in range {
        open(sessions, &format!("o{i}"), None);
    }
}

fn history(n: usize) -> Vec<Msg> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                Msg::user(format!("question {i}"))
            } else {
                Msg::assistant(format!("answer {i}"))
            }
        })
        .collect()
}

fn is_packed(sessions: &Sessions, name: &str) -> bool {
    sessions
        .slot(&key(name))
        .try_lock()
        .unwrap()
        .packed
        .is_some()
}

#[test]
fn a_session_not_opened_during_the_last_hot_openings_is_packed_and_unpacks_whole() {
    let sessions = Sessions::new(4);
    open(&sessions, "s0", Some(history(10)));
    for i in 1..=3 {
        open(&sessions, &format!("s{i}"), Some(history(2)));
    }
    // s0 is among the 4 most recently opened sessions ... until s4 opens.
    assert!(!is_packed(&sessions, "s0"));
    open(&sessions, "s4", Some(history(2)));
    assert!(is_packed(&sessions, "s0"));
    assert!(!is_packed(&sessions, "s1"));
    let slot = sessions.slot(&key("s0"));
    let mut conv = slot.try_lock().unwrap();
    assert!(
        conv.messages.is_empty(),
        "a packed conversation holds no message list"
    );
    let expected = history(10);
    conv.unpack(&key("s0")).unwrap();
    assert_eq!(conv.messages.len(), 10);
    for (got, want) in conv.messages.iter().zip(&expected) {
        assert_eq!((got.role, got.text()), (want.role, want.text()));
    }
}

#[test]
fn a_session_reopened_within_the_hot_window_stays_unpacked() {
    let sessions = Sessions::new(4);
    open(&sessions, "busy", Some(history(4)));
    for i in 0..100 {
        open(&sessions, &format!("other{i}"), None);
        open(&sessions, "busy", None);
        assert!(!is_packed(&sessions, "busy"), "packed after {i} rounds");
    }
    // The busy session costs the queue one entry per hot/2 openings, not one per
    // opening: the queue never grows past hot plus the entries that just left.
    assert!(sessions.idle.lock().unwrap().len() <= 4);
}

#[test]
fn a_session_in_use_is_never_packed_and_is_packed_once_idle_again() {
    let sessions = Sessions::new(2);
    open(&sessions, "held", Some(history(6)));
    let slot = sessions.slot(&key("held"));
    let guard = slot.try_lock().unwrap();
    open_others(&sessions, 0..10);
    assert!(guard.packed.is_none(), "a locked conversation was packed");
    assert_eq!(guard.messages.len(), 6);
    drop(guard);
    // It re-entered the queue while held: it leaves it (and is packed) once the
    // openings since then push it out.
    open_others(&sessions, 10..16);
    assert!(is_packed(&sessions, "held"));
}

#[test]
fn a_forgotten_session_leaves_nothing_behind_in_the_idle_queue() {
    let sessions = Sessions::new(2);
    open(&sessions, "gone", Some(history(4)));
    let weak = Arc::downgrade(&sessions.slot(&key("gone")));
    assert!(sessions.remove(&key("gone")));
    assert!(
        weak.upgrade().is_none(),
        "the idle queue kept the conversation alive"
    );
    // Forgotten right after its opening: its entry left the queue at once.
    assert!(sessions.idle.lock().unwrap().is_empty());
    open_others(&sessions, 0..4);
    assert!(
        sessions
            .idle
            .lock()
            .unwrap()
            .iter()
            .all(|(_, w)| !w.ptr_eq(&weak))
    );
}

#[test]
fn zero_hot_sessions_never_packs() {
    let sessions = Sessions::new(0);
    open(&sessions, "s", Some(history(4)));
    open_others(&sessions, 0..10);
    assert!(!is_packed(&sessions, "s"));
}

#[test]
fn a_conversation_that_does_not_mirror_its_store_is_dropped_not_packed() {
    let sessions = Sessions::new(1);
    open(&sessions, "leased", Some(history(4)));
    sessions.slot(&key("leased")).try_lock().unwrap().loaded = false;
    open(&sessions, "o", None);
    let slot = sessions.slot(&key("leased"));
    let conv = slot.try_lock().unwrap();
    assert!(conv.packed.is_none() && conv.messages.is_empty());
}
