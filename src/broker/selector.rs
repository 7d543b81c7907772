//! Placeholder until the selector module lands.
/// A parsed selector.
#[derive(Debug, Clone)]
pub struct Selector;
/// Values a selector can read from a message.
pub trait SelectorSource {
    /// Look up an identifier.
    fn get(&self, identifier: &str) -> Option<SelectorValue>;
}
/// A selector value.
#[derive(Debug, Clone, PartialEq)]
pub enum SelectorValue { Bool(bool), Int(i64), Float(f64), Str(String) }
impl Selector {
    /// Parse.
    pub fn parse(_text: &str) -> Result<Selector, String> { Err("selectors not built yet".into()) }
    /// Match.
    pub fn matches(&self, _msg: &dyn SelectorSource) -> bool { true }
}
