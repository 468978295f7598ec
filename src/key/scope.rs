/// Hex hash of the scope parts: each `(label, value)` in configured order, a
/// missing value distinct from an empty one. No parts → the hash of nothing
/// (one global namespace).
pub fn scope_hash(parts: &[(&str, Option<&[u8]>)]) -> String {
    let _ = parts;
    todo!("scope hash")
}
