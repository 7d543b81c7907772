//! JMS / SQL-92 message selectors for the `events` and `events-store` patterns.
//!
//! A consumer link may carry the AMQP source filter `apache.org:selector-filter:string`
//! (descriptor `0x0000468C00000004`) whose value is a JMS message selector such as
//! `color = 'red' AND size > 2`. The broker parses it once with [`Selector::parse`] at attach
//! time and calls [`Selector::matches`] for every candidate message; only messages for which
//! the selector is TRUE are delivered (FALSE and UNKNOWN both withhold the message).
//!
//! # Dialect
//!
//! The grammar is the JMS selector subset of SQL-92:
//!
//! * literals: strings `'x'` (a doubled quote `''` is a quote), exact numerics (`42`, range of
//!   `i64`), approximate numerics (`7.`, `-95.7`, `7E3`), `TRUE` / `FALSE`;
//! * identifiers (case-sensitive, Java identifier characters: letters, digits, `_`, `$`);
//! * parentheses, `NOT`, `AND`, `OR` with SQL three-valued logic;
//! * comparisons `=`, `<>`, `<`, `>`, `<=`, `>=`;
//! * arithmetic `+`, `-`, `*`, `/` and unary `+` / `-`;
//! * `[NOT] BETWEEN`, `[NOT] IN ('a', 'b', ...)`, `[NOT] LIKE 'pattern' [ESCAPE 'c']`,
//!   `IS [NOT] NULL`.
//!
//! Anything else (functions, subqueries, `CASE`, casts, `%`, `||`, `!=`, comments, quoted
//! identifiers, hexadecimal literals, `NULL` as a value, ...) is rejected by
//! [`Selector::parse`]. Integer literals are decimal (`010` is ten). The grammar comes from
//! sqlparser's generic dialect, so a handful of SQL keywords that JMS does not reserve still
//! cannot name a property (`interval`, `struct`, `exists`, `trim`); common ones such as `user`,
//! `type`, `value`, `date` or `timestamp` work. An empty selector is an error: the broker
//! should treat an absent or empty filter as "no selector" before calling [`Selector::parse`].
//!
//! # Evaluation rules (as documented by the reference connector)
//!
//! * A missing identifier is NULL; any comparison, arithmetic or `IN` / `LIKE` on NULL is
//!   UNKNOWN.
//! * A type mismatch (e.g. a string compared with a number) is UNKNOWN, never an error.
//! * Division by zero and `i64` overflow are UNKNOWN, never a panic.
//! * Numbers compare across integer and floating point exactly; strings and booleans only
//!   support `=` and `<>`. String comparison is case-sensitive.
//!
//! # Bounds
//!
//! Mirroring the reference connector, a selector is rejected at parse time when its text is
//! longer than 4096 bytes or when it has more than 64 expression nodes (every literal,
//! identifier and operator counts; parentheses do not). Parentheses may nest at most 64 deep.
//! Since the tree depth never exceeds the node count, evaluation recursion is bounded too.
//! `LIKE` matching is linear in the pattern times the value length (no backtracking blow-up).
//! One evaluation's LIKE comparisons and the bytes of the string properties it reads share
//! one budget of 16 M; past it the node is UNKNOWN (a LIKE, or a string read, that would
//! pass what is left: values that cost nothing, numbers and booleans, are still read, so
//! `costly OR n = 5` and `n = 5 OR costly` agree).

use std::borrow::Cow;
use std::cmp::Ordering;

use sqlparser::ast::{BinaryOperator, Expr, FunctionArguments, InTarget, ObjectNamePart, UnaryOperator, Value};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

/// Longest accepted selector text, in bytes.
const MAX_SELECTOR_BYTES: usize = 4096;
/// Most expression nodes a selector may have.
const MAX_NODES: usize = 64;
/// Deepest accepted parenthesis nesting.
const MAX_PAREN_DEPTH: usize = 64;
/// Most significant tokens (not counting whitespace, parentheses and commas). No construct
/// needs more than two tokens per node, so this never rejects a selector within `MAX_NODES`;
/// it bounds the parser's work before the node count is known.
const MAX_TOKENS: usize = 4 * MAX_NODES;
/// Recursion budget handed to sqlparser (only reached by hostile input).
const PARSER_RECURSION_LIMIT: usize = 256;
/// Longest error reason returned by [`Selector::parse`], in bytes.
const MAX_ERROR_BYTES: usize = 200;

#[cfg(test)]
thread_local! {
    /// Selector evaluations on this thread (tests count them).
    pub(crate) static EVALUATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A parsed selector.
#[derive(Debug, Clone)]
pub struct Selector {
    root: Node,
    /// The text it was parsed from (at most [`MAX_SELECTOR_BYTES`]): subscribers with the
    /// same text share one evaluation per message.
    text: Box<str>,
}

/// Values a selector can read from a message.
///
/// Implementations resolve an identifier (case-sensitively) to a value, or `None` when the
/// message has no such value (the selector then sees NULL). The reference connector evaluates
/// selectors against the message's application-properties plus the standard AMQP header and
/// properties fields under their JMS names; it spells out `JMSPriority` -> `header.priority`.
/// Following the AMQP JMS mapping, the broker's message view resolves:
///
/// | identifier         | AMQP field                   | value                              |
/// |--------------------|------------------------------|------------------------------------|
/// | any other name     | application-properties entry | as stored                          |
/// | `JMSMessageID`     | properties.message-id        | `Str` (or `Int` for a ulong id)    |
/// | `JMSCorrelationID` | properties.correlation-id    | `Str` (or `Int` for a ulong id)    |
/// | `JMSType`          | properties.subject           | `Str`                              |
/// | `JMSPriority`      | header.priority              | `Int` (4 when absent)              |
/// | `JMSTimestamp`     | properties.creation-time     | `Int` (ms since the epoch)         |
/// | `JMSExpiration`    | properties.absolute-expiry-time | `Int` (ms since the epoch)      |
/// | `JMSDeliveryMode`  | header.durable               | `'PERSISTENT'` / `'NON_PERSISTENT'` |
/// | `JMSDestination`   | properties.to                | `Str`                              |
/// | `JMSReplyTo`       | properties.reply-to          | `Str`                              |
/// | `JMSXUserID`       | properties.user-id           | `Str`                              |
/// | `JMSXGroupID`      | properties.group-id          | `Str`                              |
/// | `JMSXGroupSeq`     | properties.group-sequence    | `Int`                              |
///
/// AMQP values map to the nearest variant: every integer width and timestamps to `Int`,
/// `float`/`double` to `Float`, `string`/`symbol`/`char`/`uuid` to `Str`; values with no
/// selector type (binary, lists, maps, ...) are `None`.
pub trait SelectorSource {
    /// Look up an identifier: application-properties by name, plus the JMS header
    /// identifiers listed on [`SelectorSource`].
    fn get(&self, identifier: &str) -> Option<SelectorValue>;

    /// [`Self::get`], or `Err` for a string longer than `max` bytes (a source that can
    /// tell its length first does not copy it).
    fn get_within(&self, identifier: &str, max: usize) -> Result<Option<SelectorValue>, TooLong> {
        match self.get(identifier) {
            Some(SelectorValue::Str(s)) if s.len() > max => Err(TooLong),
            v => Ok(v),
        }
    }
}

/// A string longer than a selector may read now ([`SelectorSource::get_within`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong;

/// A value read from a message (or a literal in the selector).
#[derive(Debug, Clone, PartialEq)]
pub enum SelectorValue {
    /// A boolean.
    Bool(bool),
    /// An exact numeric value.
    Int(i64),
    /// An approximate numeric value.
    Float(f64),
    /// A string.
    Str(String),
}

impl Selector {
    /// Parse; Err carries a short human-readable reason (<= 200 bytes, no internals).
    pub fn parse(text: &str) -> Result<Selector, String> {
        parse_selector(text).map_err(clip_reason)
    }

    /// The text it was parsed from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True only when the selector evaluates to TRUE (UNKNOWN and FALSE both reject).
    pub fn matches(&self, msg: &dyn SelectorSource) -> bool {
        #[cfg(test)]
        EVALUATIONS.with(|n| n.set(n.get() + 1));
        self.eval(msg) == Tri::True
    }

    /// Three-valued result of the selector for `msg`. Its LIKEs and the string
    /// properties it reads share one budget of [`LIKE_BUDGET`] comparisons and bytes,
    /// so a selector made of many costly LIKEs, or naming a long property many times,
    /// costs a shard no more per message than one does.
    fn eval(&self, msg: &dyn SelectorSource) -> Tri {
        let mut budget = LIKE_BUDGET;
        eval_bool(&self.root, msg, &mut budget)
    }
}

// ---------------------------------------------------------------------------------------------
// AST
// ---------------------------------------------------------------------------------------------

/// The selector's own expression tree (a small, checked subset of sqlparser's).
#[derive(Debug, Clone)]
enum Node {
    Lit(SelectorValue),
    Ident(String),
    Not(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Cmp(CmpOp, Box<Node>, Box<Node>),
    Arith(ArithOp, Box<Node>, Box<Node>),
    Neg(Box<Node>),
    Between { expr: Box<Node>, low: Box<Node>, high: Box<Node>, negated: bool },
    In { ident: String, list: Vec<String>, negated: bool },
    Like { ident: String, pattern: LikePattern, negated: bool },
    IsNull { ident: String, negated: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// Static type of an expression, used to reject ill-typed selectors at parse time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Bool,
    Num,
    Str,
    /// An identifier: its type is only known per message.
    Any,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Bool => "a boolean",
            Ty::Num => "a number",
            Ty::Str => "a string",
            Ty::Any => "an identifier",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

fn parse_selector(text: &str) -> Result<Selector, String> {
    if text.len() > MAX_SELECTOR_BYTES {
        return Err(format!("selector is longer than {MAX_SELECTOR_BYTES} bytes"));
    }
    if text.trim().is_empty() {
        return Err("selector is empty".to_owned());
    }
    if contains_bang_eq(text) {
        return Err("unsupported operator '!=' (use '<>')".to_owned());
    }

    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text).tokenize_with_location().map_err(|e| format!("syntax error: {e}"))?;
    check_tokens(tokens.iter().map(|t| &t.token))?;

    let mut parser =
        Parser::new(&dialect).with_recursion_limit(PARSER_RECURSION_LIMIT).with_tokens_with_locations(tokens);
    let expr = parser.parse_expr().map_err(parser_error)?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(format!("unexpected '{}' after the expression", next.token));
    }

    let mut conv = Converter { nodes: 0 };
    let (root, ty) = conv.convert(&expr)?;
    if !matches!(ty, Ty::Bool | Ty::Any) {
        return Err(format!("selector must be a boolean expression, not {}", ty.name()));
    }
    Ok(Selector { root, text: text.into() })
}

/// Whether `text` has `!=` outside string literals (sqlparser would read it as `<>`).
fn contains_bang_eq(text: &str) -> bool {
    let mut in_string = false;
    let mut prev = '\0';
    for c in text.chars() {
        if c == '\'' {
            in_string = !in_string;
        } else if !in_string && prev == '!' && c == '=' {
            return true;
        }
        prev = c;
    }
    false
}

/// Token-level checks done before parsing: forms sqlparser accepts but JMS does not, and
/// bounds on the parser's work.
fn check_tokens<'a>(tokens: impl Iterator<Item = &'a Token>) -> Result<(), String> {
    let mut depth = 0usize;
    let mut significant = 0usize;
    let mut nots = 0usize;
    for token in tokens {
        match token {
            Token::Whitespace(Whitespace::SingleLineComment { .. })
            | Token::Whitespace(Whitespace::MultiLineComment(_)) => {
                return Err("comments are not allowed in a selector".to_owned());
            }
            Token::Whitespace(_) | Token::Comma | Token::EOF => {}
            Token::LParen => {
                depth += 1;
                if depth > MAX_PAREN_DEPTH {
                    return Err(format!("selector nests parentheses more than {MAX_PAREN_DEPTH} deep"));
                }
            }
            Token::RParen => depth = depth.saturating_sub(1),
            Token::DoubleEq => return Err("unsupported operator '==' (use '=')".to_owned()),
            other => {
                significant += 1;
                if let Token::Word(w) = other {
                    if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("NOT") {
                        nots += 1;
                    }
                }
                // Every NOT belongs to a distinct node, and no node needs more than two
                // tokens, so either bound being exceeded means too many nodes.
                if significant > MAX_TOKENS || nots > MAX_NODES {
                    return Err(too_many_nodes());
                }
            }
        }
    }
    Ok(())
}

fn too_many_nodes() -> String {
    format!("selector has more than {MAX_NODES} expression nodes")
}

fn parser_error(e: ParserError) -> String {
    match e {
        ParserError::RecursionLimitExceeded => "selector is nested too deeply".to_owned(),
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => {
            format!("syntax error: {m}")
        }
    }
}

/// Cut a reason to at most `MAX_ERROR_BYTES`, on a character boundary.
fn clip_reason(mut reason: String) -> String {
    if reason.len() > MAX_ERROR_BYTES {
        let mut end = MAX_ERROR_BYTES - 3;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push_str("...");
    }
    reason
}

/// Converts sqlparser's expression into [`Node`], checking the subset, static types and the
/// node budget on the way.
struct Converter {
    nodes: usize,
}

impl Converter {
    /// Count one node; fails once the budget is exceeded. Called before descending, so
    /// recursion stops at depth `MAX_NODES + 1` whatever the shape of the tree.
    fn count(&mut self) -> Result<(), String> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(too_many_nodes());
        }
        Ok(())
    }

    fn convert(&mut self, expr: &Expr) -> Result<(Node, Ty), String> {
        if let Expr::Nested(inner) = expr {
            // Parentheses are not nodes; their depth was bounded by `check_tokens`.
            return self.convert(inner);
        }
        self.count()?;
        if let Some(name) = ident_name(expr) {
            return Ok((Node::Ident(name), Ty::Any));
        }
        match expr {
            Expr::Identifier(ident) => Err(if ident.quote_style.is_some() {
                "quoted identifiers are not supported".to_owned()
            } else {
                format!("invalid identifier '{}'", ident.value)
            }),
            Expr::CompoundIdentifier(_) => Err("dotted identifiers are not supported".to_owned()),
            Expr::Value(v) => {
                let lit = literal(&v.value, false)?;
                let ty = match lit {
                    SelectorValue::Bool(_) => Ty::Bool,
                    SelectorValue::Int(_) | SelectorValue::Float(_) => Ty::Num,
                    SelectorValue::Str(_) => Ty::Str,
                };
                Ok((Node::Lit(lit), ty))
            }
            Expr::UnaryOp { op, expr: inner } => self.unary(*op, inner),
            Expr::BinaryOp { left, op, right } => self.binary(left, op, right),
            Expr::Between { expr: inner, negated, low, high } => {
                let expr = self.numeric(inner, "BETWEEN")?;
                let low = self.numeric(low, "BETWEEN")?;
                let high = self.numeric(high, "BETWEEN")?;
                Ok((
                    Node::Between { expr: Box::new(expr), low: Box::new(low), high: Box::new(high), negated: *negated },
                    Ty::Bool,
                ))
            }
            Expr::In { expr: inner, target, negated, global: false } => {
                let ident = self.operand_ident(inner, "IN")?;
                let InTarget::List(items) = target else {
                    return Err("IN requires a list of string literals".to_owned());
                };
                let mut list = Vec::with_capacity(items.len());
                for item in items {
                    self.count()?;
                    list.push(string_literal(item).ok_or_else(|| "IN requires a list of string literals".to_owned())?);
                }
                Ok((Node::In { ident, list, negated: *negated }, Ty::Bool))
            }
            Expr::Like { negated, any: false, expr: inner, pattern, escape_char } => {
                let ident = self.operand_ident(inner, "LIKE")?;
                self.count()?;
                let pattern =
                    string_literal(pattern).ok_or_else(|| "LIKE requires a string literal pattern".to_owned())?;
                let escape = match escape_char {
                    None => None,
                    Some(esc) => {
                        self.count()?;
                        let esc = string_literal(esc).ok_or_else(|| "ESCAPE requires a string literal".to_owned())?;
                        let mut chars = esc.chars();
                        match (chars.next(), chars.next()) {
                            (Some(c), None) => Some(c),
                            _ => return Err("ESCAPE must be a single character".to_owned()),
                        }
                    }
                };
                Ok((
                    Node::Like { ident, pattern: LikePattern::compile(&pattern, escape)?, negated: *negated },
                    Ty::Bool,
                ))
            }
            Expr::IsNull(inner) | Expr::IsNotNull(inner) => {
                let ident = self.operand_ident(inner, "IS NULL")?;
                Ok((Node::IsNull { ident, negated: matches!(expr, Expr::IsNotNull(_)) }, Ty::Bool))
            }
            other => Err(unsupported(other)),
        }
    }

    fn unary(&mut self, op: UnaryOperator, inner: &Expr) -> Result<(Node, Ty), String> {
        match op {
            UnaryOperator::Not => {
                let node = self.boolean(inner, "NOT")?;
                Ok((Node::Not(Box::new(node)), Ty::Bool))
            }
            UnaryOperator::Minus => {
                // Fold a negated numeric literal so that i64::MIN is expressible.
                if let Expr::Value(v) = inner {
                    if matches!(v.value, Value::Number(..)) {
                        self.count()?;
                        return Ok((Node::Lit(literal(&v.value, true)?), Ty::Num));
                    }
                }
                let node = self.numeric(inner, "unary '-'")?;
                Ok((Node::Neg(Box::new(node)), Ty::Num))
            }
            UnaryOperator::Plus => Ok((self.numeric(inner, "unary '+'")?, Ty::Num)),
            other => Err(format!("unsupported operator '{other}'")),
        }
    }

    fn binary(&mut self, left: &Expr, op: &BinaryOperator, right: &Expr) -> Result<(Node, Ty), String> {
        let arith = |op: &BinaryOperator| -> Option<ArithOp> {
            Some(match op {
                BinaryOperator::Plus => ArithOp::Add,
                BinaryOperator::Minus => ArithOp::Sub,
                BinaryOperator::Multiply => ArithOp::Mul,
                BinaryOperator::Divide => ArithOp::Div,
                _ => return None,
            })
        };
        let cmp = |op: &BinaryOperator| -> Option<CmpOp> {
            Some(match op {
                BinaryOperator::Eq => CmpOp::Eq,
                BinaryOperator::NotEq => CmpOp::Ne,
                BinaryOperator::Lt => CmpOp::Lt,
                BinaryOperator::Gt => CmpOp::Gt,
                BinaryOperator::LtEq => CmpOp::Le,
                BinaryOperator::GtEq => CmpOp::Ge,
                _ => return None,
            })
        };
        match op {
            BinaryOperator::And | BinaryOperator::Or => {
                let what = if *op == BinaryOperator::And { "AND" } else { "OR" };
                let l = Box::new(self.boolean(left, what)?);
                let r = Box::new(self.boolean(right, what)?);
                let node = if *op == BinaryOperator::And { Node::And(l, r) } else { Node::Or(l, r) };
                Ok((node, Ty::Bool))
            }
            _ => {
                if let Some(a) = arith(op) {
                    let l = self.numeric(left, "arithmetic")?;
                    let r = self.numeric(right, "arithmetic")?;
                    return Ok((Node::Arith(a, Box::new(l), Box::new(r)), Ty::Num));
                }
                let Some(c) = cmp(op) else {
                    return Err(format!("unsupported operator '{op}'"));
                };
                let (l, lt) = self.convert(left)?;
                let (r, rt) = self.convert(right)?;
                let ordering = !matches!(c, CmpOp::Eq | CmpOp::Ne);
                for ty in [lt, rt] {
                    if ordering && matches!(ty, Ty::Str | Ty::Bool) {
                        return Err(format!("'{op}' cannot compare {}; only '=' and '<>' can", ty.name()));
                    }
                }
                if lt != Ty::Any && rt != Ty::Any && lt != rt {
                    return Err(format!("cannot compare {} with {}", lt.name(), rt.name()));
                }
                Ok((Node::Cmp(c, Box::new(l), Box::new(r)), Ty::Bool))
            }
        }
    }

    /// Convert an operand that must be boolean-valued.
    fn boolean(&mut self, expr: &Expr, what: &str) -> Result<Node, String> {
        let (node, ty) = self.convert(expr)?;
        match ty {
            Ty::Bool | Ty::Any => Ok(node),
            other => Err(format!("{what} needs a boolean operand, not {}", other.name())),
        }
    }

    /// Convert an operand that must be numeric.
    fn numeric(&mut self, expr: &Expr, what: &str) -> Result<Node, String> {
        let (node, ty) = self.convert(expr)?;
        match ty {
            Ty::Num | Ty::Any => Ok(node),
            other => Err(format!("{what} needs a numeric operand, not {}", other.name())),
        }
    }

    /// The left operand of IN, LIKE and IS NULL, which JMS restricts to an identifier.
    fn operand_ident(&mut self, expr: &Expr, what: &str) -> Result<String, String> {
        let mut expr = expr;
        while let Expr::Nested(inner) = expr {
            expr = inner;
        }
        self.count()?;
        ident_name(expr).ok_or_else(|| format!("{what} must be applied to an identifier"))
    }
}

/// The identifier named by `expr`, if it is a valid unquoted JMS identifier.
///
/// sqlparser's generic dialect reads `$name` as a placeholder; JMS allows `$` in identifiers.
/// A few SQL keywords (`user`, `current_date`, ...) come back as argument-less function
/// calls; JMS has no such functions, so they are identifiers too.
fn ident_name(expr: &Expr) -> Option<String> {
    let name = match expr {
        Expr::Identifier(ident) if ident.quote_style.is_none() => &ident.value,
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) if p.starts_with('$') => p,
            _ => return None,
        },
        Expr::Function(f)
            if matches!(f.args, FunctionArguments::None)
                && matches!(f.parameters, FunctionArguments::None)
                && !f.uses_odbc_syntax
                && f.within_group.is_empty()
                && f.filter.is_none()
                && f.null_treatment.is_none()
                && f.over.is_none() =>
        {
            match f.name.0.as_slice() {
                [ObjectNamePart::Identifier(ident)] if ident.quote_style.is_none() => &ident.value,
                _ => return None,
            }
        }
        _ => return None,
    };
    let mut chars = name.chars();
    let start_ok = chars.next().is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$');
    (start_ok && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$')).then(|| name.clone())
}

fn string_literal(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn literal(value: &Value, negative: bool) -> Result<SelectorValue, String> {
    match value {
        Value::Number(text, long_suffix) => number_literal(text, *long_suffix, negative),
        Value::SingleQuotedString(s) => Ok(SelectorValue::Str(s.clone())),
        Value::Boolean(b) => Ok(SelectorValue::Bool(*b)),
        Value::Null => Err("NULL is only allowed in IS [NOT] NULL".to_owned()),
        Value::Placeholder(_) => Err("parameter placeholders are not supported".to_owned()),
        Value::DoubleQuotedString(_) => Err("double-quoted strings are not supported; use single quotes".to_owned()),
        _ => Err("unsupported literal; use 'string', numbers, TRUE or FALSE".to_owned()),
    }
}

fn number_literal(text: &str, long_suffix: bool, negative: bool) -> Result<SelectorValue, String> {
    let approximate = text.contains(['.', 'e', 'E']);
    if approximate {
        if long_suffix {
            return Err(format!("invalid numeric literal '{text}L'"));
        }
        let v: f64 = text.parse().map_err(|_| format!("invalid numeric literal '{text}'"))?;
        if !v.is_finite() {
            return Err(format!("numeric literal '{text}' is out of range"));
        }
        Ok(SelectorValue::Float(if negative { -v } else { v }))
    } else {
        if !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("invalid numeric literal '{text}'"));
        }
        let signed = if negative { Cow::Owned(format!("-{text}")) } else { Cow::Borrowed(text) };
        signed.parse::<i64>().map(SelectorValue::Int).map_err(|_| format!("integer literal '{signed}' is out of range"))
    }
}

fn unsupported(expr: &Expr) -> String {
    match expr {
        Expr::Function(_) => "functions are not supported".to_owned(),
        Expr::Subquery(_) | Expr::Exists { .. } => "subqueries are not supported".to_owned(),
        Expr::In { .. } => "IN requires a list of string literals".to_owned(),
        Expr::Case { .. } => "CASE is not supported".to_owned(),
        Expr::Cast { .. } | Expr::Convert { .. } => "casts are not supported".to_owned(),
        Expr::Like { .. } => "LIKE ANY is not supported".to_owned(),
        Expr::ILike { .. } | Expr::SimilarTo { .. } | Expr::RLike { .. } => {
            "only LIKE is supported for pattern matching".to_owned()
        }
        Expr::IsTrue(_)
        | Expr::IsNotTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotUnknown(_)
        | Expr::IsDistinctFrom(..)
        | Expr::IsNotDistinctFrom(..) => "only IS [NOT] NULL is supported".to_owned(),
        _ => "unsupported expression in selector".to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// LIKE
// ---------------------------------------------------------------------------------------------

/// A compiled LIKE pattern: the literal runs between `%` wildcards, where `None` stands for
/// `_` (exactly one character). `segments.len() == 1` means the pattern has no `%`.
#[derive(Debug, Clone)]
struct LikePattern {
    segments: Vec<Vec<Option<char>>>,
}

impl LikePattern {
    fn compile(pattern: &str, escape: Option<char>) -> Result<LikePattern, String> {
        let mut segments = vec![Vec::new()];
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let item = if Some(c) == escape {
                match chars.next() {
                    Some(escaped) => Some(escaped),
                    None => return Err("LIKE pattern ends with its escape character".to_owned()),
                }
            } else if c == '%' {
                segments.push(Vec::new());
                continue;
            } else if c == '_' {
                None
            } else {
                Some(c)
            };
            if let Some(last) = segments.last_mut() {
                last.push(item);
            }
        }
        Ok(LikePattern { segments })
    }

    /// Match `text`; `None` when the match would take more than [`LIKE_BUDGET`]
    /// character comparisons (the caller treats that as unknown). Leftmost-first
    /// placement of each `%`-separated segment is optimal, so this runs in
    /// O(pattern length x text length) without backtracking; the budget caps what one
    /// evaluation can cost a shard (a 4,096-character pattern against a long property
    /// would otherwise take billions of comparisons per event).
    ///
    /// `budget` is what is left of the evaluation's [`LIKE_BUDGET`]; the comparisons
    /// made are taken from it, and all of it once it runs out.
    fn matches(&self, text: &str, budget: &mut usize) -> Option<bool> {
        let text: Vec<char> = text.chars().collect();
        let segs = &self.segments;
        let (Some(first), Some(last)) = (segs.first(), segs.last()) else {
            return Some(text.is_empty());
        };
        if segs.len() == 1 {
            return Some(text.len() == first.len() && segment_at(&text, 0, first));
        }
        if text.len() < first.len() + last.len() {
            return Some(false);
        }
        let end = text.len() - last.len();
        if !segment_at(&text, 0, first) || !segment_at(&text, end, last) {
            return Some(false);
        }
        let mut pos = first.len();
        for seg in &segs[1..segs.len() - 1] {
            if seg.is_empty() {
                continue;
            }
            let Some(limit) = end.checked_sub(seg.len()) else {
                return Some(false);
            };
            let mut found = None;
            for i in pos..=limit {
                // A window costs at most its length in comparisons.
                let Some(left) = budget.checked_sub(seg.len()) else {
                    *budget = 0;
                    return None;
                };
                *budget = left;
                if segment_at(&text, i, seg) {
                    found = Some(i);
                    break;
                }
            }
            match found {
                Some(i) => pos = i + seg.len(),
                None => return Some(false),
            }
        }
        Some(true)
    }
}

/// Character comparisons the LIKEs of one selector evaluation may make together before
/// they give up (unknown).
const LIKE_BUDGET: usize = 1 << 24;

/// Whether `seg` matches `text` starting at `at` (bounds-checked).
fn segment_at(text: &[char], at: usize, seg: &[Option<char>]) -> bool {
    match text.get(at..at.saturating_add(seg.len())) {
        Some(window) => window.iter().zip(seg).all(|(t, p)| p.is_none() || *p == Some(*t)),
        None => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

/// SQL three-valued truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tri {
    True,
    False,
    Unknown,
}

impl Tri {
    fn from_bool(b: bool) -> Tri {
        if b {
            Tri::True
        } else {
            Tri::False
        }
    }

    fn not(self) -> Tri {
        match self {
            Tri::True => Tri::False,
            Tri::False => Tri::True,
            Tri::Unknown => Tri::Unknown,
        }
    }

    fn and(self, other: Tri) -> Tri {
        match (self, other) {
            (Tri::False, _) | (_, Tri::False) => Tri::False,
            (Tri::True, Tri::True) => Tri::True,
            _ => Tri::Unknown,
        }
    }

    fn or(self, other: Tri) -> Tri {
        match (self, other) {
            (Tri::True, _) | (_, Tri::True) => Tri::True,
            (Tri::False, Tri::False) => Tri::False,
            _ => Tri::Unknown,
        }
    }

    fn negate_if(self, negated: bool) -> Tri {
        if negated {
            self.not()
        } else {
            self
        }
    }
}

/// A value during evaluation; string literals are borrowed from the selector.
#[derive(Debug, Clone, PartialEq)]
enum Val<'a> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
}

impl From<SelectorValue> for Val<'_> {
    fn from(v: SelectorValue) -> Self {
        match v {
            SelectorValue::Bool(b) => Val::Bool(b),
            SelectorValue::Int(i) => Val::Int(i),
            SelectorValue::Float(f) => Val::Float(f),
            SelectorValue::Str(s) => Val::Str(Cow::Owned(s)),
        }
    }
}

fn eval_bool(node: &Node, msg: &dyn SelectorSource, budget: &mut usize) -> Tri {
    match node {
        Node::And(l, r) => match eval_bool(l, msg, budget) {
            Tri::False => Tri::False,
            lv => lv.and(eval_bool(r, msg, budget)),
        },
        Node::Or(l, r) => match eval_bool(l, msg, budget) {
            Tri::True => Tri::True,
            lv => lv.or(eval_bool(r, msg, budget)),
        },
        Node::Not(inner) => eval_bool(inner, msg, budget).not(),
        Node::Cmp(op, l, r) => match (eval_value(l, msg, budget), eval_value(r, msg, budget)) {
            (Some(lv), Some(rv)) => compare(*op, &lv, &rv),
            _ => Tri::Unknown,
        },
        Node::Between { expr, low, high, negated } => {
            let (Some(v), Some(lo), Some(hi)) =
                (eval_value(expr, msg, budget), eval_value(low, msg, budget), eval_value(high, msg, budget))
            else {
                return Tri::Unknown;
            };
            compare(CmpOp::Ge, &v, &lo).and(compare(CmpOp::Le, &v, &hi)).negate_if(*negated)
        }
        Node::In { ident, list, negated } => match fetch(msg, ident, budget) {
            Ok(Some(SelectorValue::Str(s))) => Tri::from_bool(list.contains(&s)).negate_if(*negated),
            _ => Tri::Unknown,
        },
        Node::Like { ident, pattern, negated } => match fetch(msg, ident, budget) {
            Ok(Some(SelectorValue::Str(s))) => match pattern.matches(&s, budget) {
                Some(m) => Tri::from_bool(m).negate_if(*negated),
                None => Tri::Unknown,
            },
            _ => Tri::Unknown,
        },
        Node::IsNull { ident, negated } => match fetch(msg, ident, budget) {
            Ok(v) => Tri::from_bool(v.is_none()).negate_if(*negated),
            Err(OverBudget) => Tri::Unknown,
        },
        Node::Lit(SelectorValue::Bool(b)) => Tri::from_bool(*b),
        Node::Ident(name) => match fetch(msg, name, budget) {
            Ok(Some(SelectorValue::Bool(b))) => Tri::from_bool(b),
            _ => Tri::Unknown,
        },
        // Non-boolean nodes are rejected by the type check; treat them as UNKNOWN anyway.
        Node::Lit(_) | Node::Arith(..) | Node::Neg(_) => Tri::Unknown,
    }
}

/// The evaluation's budget ran out.
struct OverBudget;

/// `msg`'s value of identifier `name`. A string's bytes are charged to the evaluation's
/// budget, which reads of long string properties share with LIKE comparisons: a
/// selector naming a 1 MiB property 64 times copies at most the budget (plus one
/// property), not 64 MiB, per evaluation. `Err` for a string longer than what is left
/// (the node is UNKNOWN); other values cost nothing and are read whatever is left
/// (before 2026-12-06 every read failed once the budget had run out, so a costly LIKE
/// made the cheap side of an OR unknown when it came first, and not when it came second).
fn fetch(msg: &dyn SelectorSource, name: &str, budget: &mut usize) -> Result<Option<SelectorValue>, OverBudget> {
    let Ok(v) = msg.get_within(name, *budget) else {
        *budget = 0;
        return Err(OverBudget);
    };
    if let Some(SelectorValue::Str(s)) = &v {
        // (A source may give a string a little longer than it said: lossy UTF-8.)
        *budget = budget.saturating_sub(s.len());
    }
    Ok(v)
}

/// The value of `node`, or `None` for NULL / UNKNOWN.
fn eval_value<'a>(node: &'a Node, msg: &dyn SelectorSource, budget: &mut usize) -> Option<Val<'a>> {
    match node {
        Node::Lit(v) => Some(match v {
            SelectorValue::Bool(b) => Val::Bool(*b),
            SelectorValue::Int(i) => Val::Int(*i),
            SelectorValue::Float(f) => Val::Float(*f),
            SelectorValue::Str(s) => Val::Str(Cow::Borrowed(s)),
        }),
        Node::Ident(name) => fetch(msg, name, budget).ok()?.map(Val::from),
        Node::Neg(inner) => match eval_value(inner, msg, budget)? {
            Val::Int(i) => i.checked_neg().map(Val::Int),
            Val::Float(f) => Some(Val::Float(-f)),
            _ => None,
        },
        Node::Arith(op, l, r) => arith(*op, eval_value(l, msg, budget)?, eval_value(r, msg, budget)?),
        _ => match eval_bool(node, msg, budget) {
            Tri::True => Some(Val::Bool(true)),
            Tri::False => Some(Val::Bool(false)),
            Tri::Unknown => None,
        },
    }
}

fn arith(op: ArithOp, l: Val<'_>, r: Val<'_>) -> Option<Val<'static>> {
    match (l, r) {
        (Val::Int(a), Val::Int(b)) => match op {
            ArithOp::Add => a.checked_add(b),
            ArithOp::Sub => a.checked_sub(b),
            ArithOp::Mul => a.checked_mul(b),
            ArithOp::Div => a.checked_div(b),
        }
        .map(Val::Int),
        (l, r) => {
            let a = as_float(&l)?;
            let b = as_float(&r)?;
            let v = match op {
                ArithOp::Add => a + b,
                ArithOp::Sub => a - b,
                ArithOp::Mul => a * b,
                ArithOp::Div if b == 0.0 => return None,
                ArithOp::Div => a / b,
            };
            (!v.is_nan()).then_some(Val::Float(v))
        }
    }
}

fn as_float(v: &Val<'_>) -> Option<f64> {
    match v {
        Val::Int(i) => Some(*i as f64),
        Val::Float(f) => Some(*f),
        _ => None,
    }
}

fn compare(op: CmpOp, l: &Val<'_>, r: &Val<'_>) -> Tri {
    let ordering = match (l, r) {
        (Val::Int(a), Val::Int(b)) => Some(a.cmp(b)),
        (Val::Int(a), Val::Float(b)) => cmp_int_float(*a, *b),
        (Val::Float(a), Val::Int(b)) => cmp_int_float(*b, *a).map(Ordering::reverse),
        (Val::Float(a), Val::Float(b)) => a.partial_cmp(b),
        (Val::Str(a), Val::Str(b)) => return equality(op, a == b),
        (Val::Bool(a), Val::Bool(b)) => return equality(op, a == b),
        _ => return Tri::Unknown,
    };
    let Some(ordering) = ordering else {
        return Tri::Unknown;
    };
    Tri::from_bool(match op {
        CmpOp::Eq => ordering == Ordering::Equal,
        CmpOp::Ne => ordering != Ordering::Equal,
        CmpOp::Lt => ordering == Ordering::Less,
        CmpOp::Gt => ordering == Ordering::Greater,
        CmpOp::Le => ordering != Ordering::Greater,
        CmpOp::Ge => ordering != Ordering::Less,
    })
}

/// Strings and booleans only support `=` and `<>`.
fn equality(op: CmpOp, equal: bool) -> Tri {
    match op {
        CmpOp::Eq => Tri::from_bool(equal),
        CmpOp::Ne => Tri::from_bool(!equal),
        _ => Tri::Unknown,
    }
}

/// Exact comparison of an integer with a float (no rounding of large integers).
fn cmp_int_float(i: i64, f: f64) -> Option<Ordering> {
    // 2^63 is exactly representable; every i64 is below it and at or above -2^63.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() {
        return None;
    }
    if f >= TWO_63 {
        return Some(Ordering::Less);
    }
    if f < -TWO_63 {
        return Some(Ordering::Greater);
    }
    let whole = f.trunc();
    // In range and integral, so the conversion is exact.
    let whole_int = whole as i64;
    Some(match i.cmp(&whole_int) {
        Ordering::Equal => {
            let frac = f - whole;
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        other => other,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    struct Msg(HashMap<String, SelectorValue>);

    impl Msg {
        fn with(mut self, k: &str, v: SelectorValue) -> Self {
            self.0.insert(k.to_owned(), v);
            self
        }
        fn s(self, k: &str, v: &str) -> Self {
            self.with(k, SelectorValue::Str(v.to_owned()))
        }
        fn i(self, k: &str, v: i64) -> Self {
            self.with(k, SelectorValue::Int(v))
        }
        fn f(self, k: &str, v: f64) -> Self {
            self.with(k, SelectorValue::Float(v))
        }
        fn b(self, k: &str, v: bool) -> Self {
            self.with(k, SelectorValue::Bool(v))
        }
    }

    impl SelectorSource for Msg {
        fn get(&self, identifier: &str) -> Option<SelectorValue> {
            self.0.get(identifier).cloned()
        }
    }

    fn sel(text: &str) -> Selector {
        match Selector::parse(text) {
            Ok(s) => s,
            Err(e) => panic!("{text:?} failed to parse: {e}"),
        }
    }

    fn tri(text: &str, msg: &Msg) -> Tri {
        sel(text).eval(msg)
    }

    fn yes(text: &str, msg: &Msg) {
        assert_eq!(tri(text, msg), Tri::True, "{text:?} should be TRUE");
        assert!(sel(text).matches(msg));
    }

    fn no(text: &str, msg: &Msg) {
        assert_eq!(tri(text, msg), Tri::False, "{text:?} should be FALSE");
        assert!(!sel(text).matches(msg));
    }

    fn unknown(text: &str, msg: &Msg) {
        assert_eq!(tri(text, msg), Tri::Unknown, "{text:?} should be UNKNOWN");
        assert!(!sel(text).matches(msg));
    }

    fn err(text: &str) -> String {
        match Selector::parse(text) {
            Ok(s) => panic!("{text:?} should not parse, got {s:?}"),
            Err(e) => {
                assert!(e.len() <= MAX_ERROR_BYTES, "reason too long: {e}");
                assert!(!e.is_empty());
                e
            }
        }
    }

    fn empty() -> Msg {
        Msg::default()
    }

    /// t = TRUE, f = FALSE, u = missing (UNKNOWN).
    fn tfu() -> Msg {
        empty().b("t", true).b("f", false)
    }

    // --- the reference example -------------------------------------------------------------

    #[test]
    fn reference_example() {
        let s = sel("color = 'red' AND size > 2");
        assert!(s.matches(&empty().s("color", "red").i("size", 5)));
        assert!(!s.matches(&empty().s("color", "blue").i("size", 9)));
        assert!(!s.matches(&empty().s("color", "red").i("size", 1)));
        assert!(!s.matches(&empty().i("size", 5)));
        assert!(!s.matches(&empty().s("color", "RED").i("size", 5)));
    }

    // --- three-valued logic ----------------------------------------------------------------

    #[test]
    fn and_truth_table() {
        let m = tfu();
        yes("t AND t", &m);
        no("t AND f", &m);
        unknown("t AND u", &m);
        no("f AND t", &m);
        no("f AND f", &m);
        no("f AND u", &m);
        unknown("u AND t", &m);
        no("u AND f", &m);
        unknown("u AND u", &m);
    }

    #[test]
    fn or_truth_table() {
        let m = tfu();
        yes("t OR t", &m);
        yes("t OR f", &m);
        yes("t OR u", &m);
        yes("f OR t", &m);
        no("f OR f", &m);
        unknown("f OR u", &m);
        yes("u OR t", &m);
        unknown("u OR f", &m);
        unknown("u OR u", &m);
    }

    #[test]
    fn not_truth_table() {
        let m = tfu();
        no("NOT t", &m);
        yes("NOT f", &m);
        unknown("NOT u", &m);
        yes("NOT NOT t", &m);
        unknown("NOT NOT u", &m);
    }

    #[test]
    fn tri_operations_directly() {
        use Tri::*;
        let all = [True, False, Unknown];
        for a in all {
            for b in all {
                assert_eq!(a.and(b), b.and(a));
                assert_eq!(a.or(b), b.or(a));
                // De Morgan holds in Kleene logic.
                assert_eq!(a.and(b).not(), a.not().or(b.not()));
            }
        }
    }

    #[test]
    fn boolean_literals_and_identifiers() {
        let m = tfu().i("n", 1).s("s", "true");
        yes("TRUE", &m);
        no("FALSE", &m);
        yes("true", &m);
        no("fAlSe", &m);
        yes("t", &m);
        no("f", &m);
        unknown("u", &m);
        // A non-boolean identifier used as a condition is UNKNOWN.
        unknown("n", &m);
        unknown("s", &m);
        yes("t = TRUE", &m);
        yes("f = FALSE", &m);
        yes("t <> f", &m);
        unknown("u = TRUE", &m);
        yes("(n = 1) = TRUE", &m);
        yes("(n = 1) <> (n = 2)", &m);
    }

    #[test]
    fn short_circuit_does_not_hide_unknown() {
        let m = empty().i("a", 1);
        yes("a = 1 OR missing = 1", &m);
        no("a = 2 AND missing = 1", &m);
        unknown("a = 1 AND missing = 1", &m);
        unknown("a = 2 OR missing = 1", &m);
    }

    // --- comparisons -----------------------------------------------------------------------

    #[test]
    fn numeric_comparisons() {
        let m = empty().i("n", 5).f("x", 2.5);
        yes("n = 5", &m);
        no("n = 4", &m);
        yes("n <> 4", &m);
        no("n <> 5", &m);
        yes("n > 4", &m);
        no("n > 5", &m);
        yes("n >= 5", &m);
        no("n >= 6", &m);
        yes("n < 6", &m);
        no("n < 5", &m);
        yes("n <= 5", &m);
        no("n <= 4", &m);
        yes("x = 2.5", &m);
        yes("x < 3", &m);
        yes("x > 2", &m);
        yes("5 = n", &m);
        yes("2 < x", &m);
    }

    #[test]
    fn int_float_cross_comparisons() {
        let m = empty().i("n", 5).f("five", 5.0).i("big", i64::MAX).f("x", 5.5);
        yes("n = 5.0", &m);
        yes("five = 5", &m);
        yes("n = five", &m);
        yes("n < x", &m);
        yes("x > n", &m);
        yes("n < 5.000001", &m);
        yes("n > 4.999999", &m);
        yes("-5 < -4.5", &m);
        yes("-5 > -5.5", &m);
        // i64::MAX is not exactly representable as f64; 2^63 is above it.
        yes("big < 9223372036854775808.0", &m);
        no("big = 9223372036854775808.0", &m);
        yes("big > 9.2e18", &m);
        yes("-9223372036854775808 = -9223372036854775808.0", &m);
        yes("-9223372036854775808 > -1e19", &m);
    }

    #[test]
    fn nan_property_is_unknown() {
        let m = empty().f("nan", f64::NAN).f("inf", f64::INFINITY);
        unknown("nan = 1", &m);
        unknown("nan < 1", &m);
        unknown("nan <> nan", &m);
        yes("inf > 1e308", &m);
        yes("inf > 9223372036854775807", &m);
    }

    #[test]
    fn string_comparisons() {
        let m = empty().s("s", "abc").s("q", "it's");
        yes("s = 'abc'", &m);
        no("s = 'ABC'", &m);
        yes("s <> 'abd'", &m);
        no("s <> 'abc'", &m);
        yes("q = 'it''s'", &m);
        yes("'abc' = s", &m);
        yes("s = s", &m);
        // Ordering on string values is UNKNOWN at run time...
        unknown("s < q", &m);
        unknown("s >= q", &m);
        // ...and a parse error when a side is a string literal.
        assert!(err("s < 'b'").contains("'<'"));
        err("'a' >= s");
    }

    #[test]
    fn boolean_ordering_is_unknown_or_rejected() {
        let m = tfu();
        unknown("t > f", &m);
        err("t > TRUE");
        err("TRUE < FALSE");
    }

    #[test]
    fn missing_identifier_is_unknown_everywhere() {
        let m = empty();
        unknown("a = 1", &m);
        unknown("a <> 1", &m);
        unknown("a > 1", &m);
        unknown("a = 'x'", &m);
        unknown("a + 1 = 2", &m);
        unknown("-a = 1", &m);
        unknown("a BETWEEN 1 AND 2", &m);
        unknown("a NOT BETWEEN 1 AND 2", &m);
        unknown("1 BETWEEN a AND 2", &m);
        unknown("a IN ('x')", &m);
        unknown("a NOT IN ('x')", &m);
        unknown("a LIKE 'x%'", &m);
        unknown("a NOT LIKE 'x%'", &m);
        unknown("NOT a = 1", &m);
        yes("a IS NULL", &m);
        no("a IS NOT NULL", &m);
    }

    #[test]
    fn type_mismatches_are_unknown() {
        let m = empty().s("s", "5").i("n", 5).b("t", true);
        unknown("s = 5", &m);
        unknown("n = '5'", &m);
        unknown("NOT s = 5", &m);
        unknown("s <> 5", &m);
        unknown("t = 1", &m);
        unknown("n = TRUE", &m);
        unknown("s > 1", &m);
        unknown("s + 1 = 6", &m);
        unknown("t * 2 = 2", &m);
        unknown("s BETWEEN 1 AND 9", &m);
        unknown("n IN ('5')", &m);
        unknown("n LIKE '5'", &m);
        unknown("t IN ('true')", &m);
        unknown("s = n", &m);
        yes("s IS NOT NULL", &m);
    }

    #[test]
    fn static_type_mismatches_are_rejected() {
        err("'5' = 5");
        err("TRUE = 1");
        err("'a' = TRUE");
        err("'a' + 1 = 2");
        err("a + 'b' = 2");
        err("(a = 1) + 1 = 2");
        err("1 AND a");
        err("a OR 'x'");
        err("NOT 5");
        err("-'x' = a");
        err("-TRUE = a");
        err("'x' BETWEEN 'a' AND 'z'");
        err("a BETWEEN 'a' AND 'z'");
        err("a = 1 = 2");
    }

    #[test]
    fn selector_must_be_boolean() {
        assert!(err("1").contains("boolean"));
        err("'red'");
        err("a + 1");
        err("-a");
        err("1.5");
    }

    // --- arithmetic ------------------------------------------------------------------------

    #[test]
    fn arithmetic_and_precedence() {
        let m = empty().i("a", 2).i("b", 3).i("c", 4).f("x", 0.5);
        yes("a + b * c = 14", &m);
        yes("(a + b) * c = 20", &m);
        yes("a * b + c = 10", &m);
        yes("c - b - a = -1", &m);
        yes("c / a / a = 1", &m);
        yes("c - a * b = -2", &m);
        yes("-a * b = -6", &m);
        yes("- - a = 2", &m);
        yes("+a = 2", &m);
        yes("-(a + b) = -5", &m);
        yes("a + x = 2.5", &m);
        yes("a * x = 1", &m);
        yes("a / x = 4", &m);
        yes("b / a = 1", &m); // integer division
        yes("b / 2.0 = 1.5", &m);
        yes("7 / -2 = -3", &m);
        yes("1 + 2 * 3 > 6 AND 2 * 3 - 1 < 6", &m);
        yes("a > 1 + 0.5", &m);
    }

    #[test]
    fn division_by_zero_is_unknown() {
        let m = empty().i("a", 2).i("z", 0).f("fz", 0.0);
        unknown("a / 0 = 1", &m);
        unknown("a / z = 1", &m);
        unknown("a / 0.0 = 1", &m);
        unknown("a / fz > 1", &m);
        unknown("1.5 / z > 1", &m);
        unknown("NOT a / z = 1", &m);
        // UNKNOWN still loses to TRUE under OR.
        yes("a / z = 1 OR a = 2", &m);
    }

    #[test]
    fn integer_overflow_is_unknown() {
        let m = empty().i("max", i64::MAX).i("min", i64::MIN);
        unknown("max + 1 > 0", &m);
        unknown("min - 1 < 0", &m);
        unknown("max * 2 > 0", &m);
        unknown("min / -1 > 0", &m);
        unknown("-min > 0", &m);
        yes("max - 1 < max", &m);
        yes("min + 0.0 < 0", &m);
        yes("max * 2.0 > max", &m);
    }

    #[test]
    fn float_overflow_and_nan() {
        let m = empty().f("big", 1e308).f("inf", f64::INFINITY);
        yes("big * 10 > big", &m);
        unknown("inf - inf = 0", &m);
    }

    #[test]
    fn numeric_literals() {
        let m = empty().i("n", 7).f("x", 7000.0).f("y", -5790.0);
        yes("n = 7", &m);
        yes("n = 7.", &m);
        yes("n = 7.0", &m);
        yes("x = 7E3", &m);
        yes("x = 7e3", &m);
        yes("y = -57.9E2", &m);
        yes("n > .5", &m);
        yes("n = +7", &m);
        yes("n = 7L", &m);
        yes("9223372036854775807 > 0", &m);
        yes("-9223372036854775808 < 0", &m);
        assert!(err("n = 9223372036854775808").contains("out of range"));
        err("n = -9223372036854775809");
        assert!(err("x = 1e400").contains("out of range"));
        err("n = 0x1F");
        err("n = X'1F'");
    }

    // --- BETWEEN ---------------------------------------------------------------------------

    #[test]
    fn between_edges() {
        let m = empty().i("n", 5).f("x", 5.5);
        yes("n BETWEEN 5 AND 10", &m);
        yes("n BETWEEN 1 AND 5", &m);
        yes("n BETWEEN 5 AND 5", &m);
        no("n BETWEEN 6 AND 10", &m);
        no("n BETWEEN 1 AND 4", &m);
        no("n BETWEEN 10 AND 1", &m);
        yes("x BETWEEN 5 AND 6", &m);
        yes("n BETWEEN 4.5 AND 5.5", &m);
        no("x BETWEEN 5.6 AND 6", &m);
        no("n NOT BETWEEN 5 AND 10", &m);
        yes("n NOT BETWEEN 6 AND 10", &m);
        yes("n NOT BETWEEN 10 AND 1", &m);
        yes("n + 1 BETWEEN n AND n * 2", &m);
        yes("n BETWEEN 1 AND 10 AND n = 5", &m);
        yes("NOT n BETWEEN 6 AND 10", &m);
        // A missing bound is UNKNOWN even when the other bound already fails.
        unknown("n BETWEEN 6 AND missing", &m);
        unknown("n NOT BETWEEN missing AND 10", &m);
    }

    // --- IN --------------------------------------------------------------------------------

    #[test]
    fn in_lists() {
        let m = empty().s("c", "red").s("q", "it's");
        yes("c IN ('red')", &m);
        yes("c IN ('blue', 'red', 'green')", &m);
        no("c IN ('blue', 'green')", &m);
        no("c IN ('RED')", &m);
        no("c NOT IN ('red', 'blue')", &m);
        yes("c NOT IN ('blue', 'green')", &m);
        yes("q IN ('it''s')", &m);
        yes("NOT c IN ('blue')", &m);
        yes("(c) IN ('red')", &m);
        err("c IN ()");
        err("c IN (1, 2)");
        err("c IN ('a', 1)");
        err("c IN ('a', d)");
        err("'red' IN ('red')");
        err("c + 1 IN ('2')");
        err("c IN (SELECT x FROM t)");
    }

    // --- LIKE ------------------------------------------------------------------------------

    #[test]
    fn like_wildcards() {
        let m = empty().s("s", "hello world").s("e", "").s("u", "größe").s("p", "50%").s("us", "a_b");
        yes("s LIKE 'hello world'", &m);
        yes("s LIKE 'hello%'", &m);
        yes("s LIKE '%world'", &m);
        yes("s LIKE '%lo wo%'", &m);
        yes("s LIKE '%'", &m);
        yes("s LIKE '%%'", &m);
        yes("s LIKE 'h_llo%'", &m);
        yes("s LIKE '___________'", &m);
        no("s LIKE '__________'", &m);
        no("s LIKE '____________'", &m);
        yes("s LIKE 'h%o%o%d'", &m);
        yes("s LIKE '%o%o%'", &m);
        no("s LIKE '%o%o%o%'", &m);
        no("s LIKE 'hello'", &m);
        no("s LIKE 'world%'", &m);
        no("s LIKE 'Hello%'", &m);
        yes("s NOT LIKE 'x%'", &m);
        no("s NOT LIKE 'h%'", &m);
        yes("e LIKE ''", &m);
        yes("e LIKE '%'", &m);
        no("e LIKE '_'", &m);
        no("e LIKE '%_%'", &m);
        no("s LIKE ''", &m);
        yes("u LIKE 'gr__e'", &m);
        yes("u LIKE '%ö%'", &m);
        yes("p LIKE '50%'", &m);
        yes("us LIKE 'a_b'", &m);
        // Overlapping prefix and suffix must not share characters.
        let m2 = empty().s("s", "aba");
        yes("s LIKE 'ab%ba'", &empty().s("s", "abba"));
        no("s LIKE 'ab%ba'", &m2);
        yes("s LIKE 'a%a'", &m2);
        no("s LIKE 'a%a'", &empty().s("s", "a"));
        yes("s LIKE '%a%b%a%'", &m2);
        yes("s LIKE '_%_'", &m2);
    }

    #[test]
    fn like_escape() {
        let m =
            empty().s("p", "50%").s("q", "50 percent").s("u", "a_b").s("v", "axb").s("bs", "c:\\dir").s("bang", "wow!");
        yes("p LIKE '50!%' ESCAPE '!'", &m);
        no("q LIKE '50!%' ESCAPE '!'", &m);
        yes("q LIKE '50%' ESCAPE '!'", &m);
        yes("u LIKE 'a!_b' ESCAPE '!'", &m);
        no("v LIKE 'a!_b' ESCAPE '!'", &m);
        yes("v LIKE 'a_b' ESCAPE '!'", &m);
        yes("bang LIKE 'wow!!' ESCAPE '!'", &m);
        yes("bang LIKE '%!!' ESCAPE '!'", &m);
        yes("u LIKE '%\\_%' ESCAPE '\\'", &m);
        no("v LIKE '%\\_%' ESCAPE '\\'", &m);
        // Without ESCAPE, a backslash is an ordinary character.
        yes("bs LIKE 'c:\\dir'", &m);
        yes("p LIKE '%#%' ESCAPE '#'", &m);
        // An escaped ordinary character is that character.
        yes("v LIKE '!a!x!b' ESCAPE '!'", &m);
        yes("p NOT LIKE '50!_' ESCAPE '!'", &m);
        assert!(err("p LIKE '50!' ESCAPE '!'").contains("escape"));
        err("p LIKE 'x' ESCAPE ''");
        err("p LIKE 'x' ESCAPE '!!'");
        err("p LIKE 'x' ESCAPE 1");
        err("p LIKE 1");
        err("p LIKE q");
        err("'x' LIKE 'x'");
        err("p ILIKE 'x'");
        err("p SIMILAR TO 'x'");
    }

    #[test]
    fn like_pathological_pattern_finishes() {
        let long = "a".repeat(200_000);
        let m = empty().s("s", &long);
        no("s LIKE '%a%a%a%a%a%a%a%a%a%b'", &m);
        yes("s LIKE '%a%a%a%a%a%a%a%a%a%a'", &m);
        no("s LIKE '%aaaaaaaaaaaaaaaaaaaaaaaaaaaab%'", &m);
        no("s LIKE '%_%_%_%_%_%_%_%_%_%_%_%_%b'", &m);
        yes("s LIKE '%_%_%_%_%_%_%_%_%_%_%_%_%'", &m);
        let pattern = format!("s LIKE '{}b'", "%a".repeat(20));
        no(&pattern, &m);
    }

    #[test]
    fn like_pattern_unit() {
        let p = LikePattern::compile("a%b_c%", None).unwrap();
        assert_eq!(p.matches("abxc", &mut { LIKE_BUDGET }), Some(true));
        assert_eq!(p.matches("azzzbxczzz", &mut { LIKE_BUDGET }), Some(true));
        assert_eq!(p.matches("abc", &mut { LIKE_BUDGET }), Some(false));
        let p = LikePattern::compile("", None).unwrap();
        assert_eq!(p.matches("", &mut { LIKE_BUDGET }), Some(true));
        assert_eq!(p.matches("x", &mut { LIKE_BUDGET }), Some(false));
        let p = LikePattern::compile("%", None).unwrap();
        assert_eq!(p.matches("", &mut { LIKE_BUDGET }), Some(true));
        assert_eq!(p.matches("anything", &mut { LIKE_BUDGET }), Some(true));
    }

    /// A long middle segment against a long text that almost matches everywhere would
    /// take billions of comparisons: the evaluation gives up (unknown: neither LIKE
    /// nor NOT LIKE selects the message), and a cheap match on the same text still
    /// answers.
    #[test]
    fn like_gives_up_past_its_comparison_budget() {
        let text = "a".repeat(1 << 20);
        let seg = format!("%{}b%", "a".repeat(4000));
        let p = LikePattern::compile(&seg, None).unwrap();
        assert_eq!(p.matches(&text, &mut { LIKE_BUDGET }), None);
        let m = empty().s("s", &text);
        unknown(&format!("s LIKE '{seg}'"), &m);
        unknown(&format!("s NOT LIKE '{seg}'"), &m);
        yes("s LIKE '%aaa%'", &m);
        yes("s NOT LIKE '%b%'", &m);
    }

    /// The LIKEs of one evaluation share one budget: one LIKE that costs a quarter of
    /// it answers, and so do four, but sixteen of them ORed give up (unknown) instead
    /// of costing four budgets. Before, each LIKE had a budget of its own, so a
    /// selector of 16 costly LIKEs cost a shard 16 budgets for every message, for every
    /// subscriber holding it.
    #[test]
    fn the_likes_of_one_selector_share_one_budget() {
        let m = empty().s("s", &"a".repeat(1 << 16));
        // 65,473 windows of a 64-character segment: 4.19 M comparisons charged.
        let like = format!("s LIKE '%{}b%'", "a".repeat(63));
        no(&like, &m);
        // Three fit the budget (with the 64 KiB read of `s` each, four no longer do).
        no(&[like.as_str(); 3].join(" OR "), &m);
        unknown(&[like.as_str(); 16].join(" OR "), &m);
        // The next evaluation has its whole budget again.
        no(&like, &m);
    }

    /// A string property's bytes count against the evaluation's budget: a selector that
    /// names a 1 MiB property twenty times reads at most 16 MiB of it (the budget) and
    /// is UNKNOWN past it, where it used to copy all 20 MiB; the same selector on a short
    /// property is as before.
    #[test]
    fn reads_of_long_string_properties_share_the_budget() {
        struct Counting(Msg, std::cell::Cell<usize>);
        impl SelectorSource for Counting {
            fn get(&self, identifier: &str) -> Option<SelectorValue> {
                let v = self.0.get(identifier);
                if let Some(SelectorValue::Str(s)) = &v {
                    self.1.set(self.1.get() + s.len());
                }
                v
            }
            // As `SelectorView` does: the length is known before the copy.
            fn get_within(&self, identifier: &str, max: usize) -> Result<Option<SelectorValue>, TooLong> {
                match self.0.get(identifier) {
                    Some(SelectorValue::Str(s)) if s.len() > max => Err(TooLong),
                    _ => Ok(self.get(identifier)),
                }
            }
        }
        let text = ["p IS NULL"; 19].join(" OR ") + " OR p IS NOT NULL";
        let long = Counting(empty().s("p", &"a".repeat(1 << 20)), Default::default());
        assert_eq!(sel(&text).eval(&long), Tri::Unknown);
        assert!(long.1.get() <= (16 << 20) + (1 << 20), "{} bytes read", long.1.get());
        let short = Counting(empty().s("p", "a"), Default::default());
        assert_eq!(sel(&text).eval(&short), Tri::True);
    }

    // --- IS NULL ---------------------------------------------------------------------------

    #[test]
    fn is_null() {
        let m = empty().i("n", 0).s("e", "").b("f", false);
        no("n IS NULL", &m);
        yes("n IS NOT NULL", &m);
        no("e IS NULL", &m);
        no("f IS NULL", &m);
        yes("missing IS NULL", &m);
        no("missing IS NOT NULL", &m);
        yes("NOT missing IS NOT NULL", &m);
        yes("missing IS NULL OR missing > 3", &m);
        yes("(n) IS NOT NULL", &m);
        err("1 IS NULL");
        err("n + 1 IS NULL");
        err("n = NULL");
        err("NULL IS NULL");
        err("n IS TRUE");
        err("n IS NOT FALSE");
        err("n IS UNKNOWN");
        err("n IS DISTINCT FROM 1");
    }

    // --- identifiers -----------------------------------------------------------------------

    #[test]
    fn identifiers() {
        let m = empty()
            .i("a$b", 1)
            .i("$x", 2)
            .i("_y", 3)
            .i("größe", 4)
            .s("JMSType", "order")
            .i("JMSPriority", 7)
            .s("JMSCorrelationID", "c-1")
            .i("Size", 1)
            .i("size", 2);
        yes("a$b = 1", &m);
        yes("$x = 2", &m);
        yes("_y = 3", &m);
        yes("größe = 4", &m);
        yes("JMSType = 'order'", &m);
        yes("JMSPriority > 4", &m);
        yes("JMSCorrelationID = 'c-1'", &m);
        // SQL keywords that are not JMS keywords still work as property names.
        let k = empty()
            .s("user", "bob")
            .i("current_date", 1)
            .i("timestamp", 2)
            .s("type", "t")
            .i("value", 3)
            .i("date", 4)
            .i("count", 5);
        yes("user = 'bob'", &k);
        yes("user IN ('bob') AND user LIKE 'b%' AND user IS NOT NULL", &k);
        yes("current_date = 1 AND timestamp = 2 AND type = 't'", &k);
        yes("value + date + count = 12", &k);
        err("user() = 'bob'");
        err("\"user\" = 'bob'");
        // Identifiers are case-sensitive.
        yes("Size = 1 AND size = 2", &m);
        unknown("SIZE = 1", &m);
        unknown("jmstype = 'order'", &m);
        assert!(err("\"a\" = 1").contains("quoted"));
        err("`a` = 1");
        err("[a] = 1");
        assert!(err("a.b = 1").contains("dotted"));
        err("@a = 1");
        err("#a = 1");
        err("a = ?");
    }

    #[test]
    fn source_sees_exact_identifier() {
        struct Recorder(std::cell::RefCell<Vec<String>>);
        impl SelectorSource for Recorder {
            fn get(&self, identifier: &str) -> Option<SelectorValue> {
                self.0.borrow_mut().push(identifier.to_owned());
                None
            }
        }
        let r = Recorder(Default::default());
        assert!(!sel("JMSMessageID = 'ID:1' OR Color IN ('x')").matches(&r));
        assert_eq!(*r.0.borrow(), vec!["JMSMessageID", "Color"]);
    }

    #[test]
    fn keywords_are_case_insensitive_and_whitespace_is_free() {
        let m = empty().i("n", 5).s("s", "abc");
        yes("n between 1 and 9 and s like 'a%' and s in ('abc') and s is not null", &m);
        yes("not n<>5 or n=0", &m);
        yes("  n\t=\n5  ", &m);
        yes("(n=5)AND(s='abc')", &m);
    }

    // --- parse errors ----------------------------------------------------------------------

    #[test]
    fn unsupported_syntax_is_rejected() {
        assert!(err("f(a) = 1").contains("function"));
        err("UPPER(s) = 'A'");
        err("a % 2 = 0");
        err("s || 't' = 'x'");
        err("CASE WHEN a = 1 THEN TRUE ELSE FALSE END");
        err("CAST(a AS INT) = 1");
        err("EXISTS (SELECT 1)");
        err("a = (SELECT 1)");
        err("a & 1 = 1");
        err("a ^ 1 = 1");
        err("a::int = 1");
        err("a[1] = 1");
        err("a = \"x\"");
        err("a = N'x'");
        err("a = E'x'");
        err("a = DATE '2020-01-01'");
        err("a = INTERVAL '1' DAY");
        err("a -> 'b' = 1");
        assert!(err("a != 1").contains("<>"));
        err("a == 1");
        assert!(err("a--1 > 0").contains("comment"));
        err("a = 1 /* c */");
        // `!=` inside a string literal is fine.
        yes("s = 'a!=b'", &empty().s("s", "a!=b"));
    }

    #[test]
    fn malformed_selectors_are_rejected() {
        err("");
        err("   ");
        err("a =");
        err("= 1");
        err("a = 1 AND");
        err("(a = 1");
        err("a = 1)");
        err("a = 'unterminated");
        assert!(err("a = 1 garbage").contains("garbage"));
        err("a = 1 b = 2");
        err("a BETWEEN 1");
        err("a BETWEEN 1 OR 2");
        err("a IN 'x'");
        err("a IS");
        err("a LIKE");
        err("a = 'x' 'y'");
        err("a = 1;");
        err("SELECT * FROM t");
    }

    #[test]
    fn error_reasons_are_short() {
        let long_token = format!("a = 1 {}", "x".repeat(3000));
        let e = err(&long_token);
        assert!(e.len() <= MAX_ERROR_BYTES);
        let long_str = format!("a = 1 'ü{}'", "ü".repeat(1500));
        let e = err(&long_str);
        assert!(e.len() <= MAX_ERROR_BYTES);
        assert_eq!(clip_reason("é".repeat(150)).len(), 199);
    }

    // --- limits ----------------------------------------------------------------------------

    #[test]
    fn length_limit() {
        let pad = |n: usize| format!("s = '{}'", "x".repeat(n - 6));
        let ok = pad(MAX_SELECTOR_BYTES);
        assert_eq!(ok.len(), MAX_SELECTOR_BYTES);
        sel(&ok);
        let too_long = pad(MAX_SELECTOR_BYTES + 1);
        assert!(err(&too_long).contains("4096"));
        err(&"a".repeat(1 << 20));
    }

    #[test]
    fn node_limit() {
        // n terms `a = 1` joined by OR: 3n + (n - 1) nodes.
        let terms = |n: usize| vec!["a = 1"; n].join(" OR ");
        sel(&terms(16)); // 63 nodes
        assert!(err(&terms(17)).contains("64")); // 67 nodes
                                                 // IN list items count: IN + identifier + 62 items = 64 nodes.
        let list = |n: usize| {
            let items: Vec<String> = (0..n).map(|i| format!("'v{i}'")).collect();
            format!("c IN ({})", items.join(", "))
        };
        let s = sel(&list(62));
        assert!(s.matches(&empty().s("c", "v61")));
        err(&list(63));
        // Parentheses are not nodes.
        sel(&format!("{}a{}", "(".repeat(40), ")".repeat(40)));
        // A long flat chain is rejected without deep recursion.
        err(&vec!["a"; 2000].join("+"));
        err(&format!("{} = 1", vec!["a"; 1000].join(" * ")));
    }

    #[test]
    fn depth_limit() {
        // 63 NOTs + identifier = 64 nodes, 64 deep.
        let nots = |n: usize| format!("{}t", "NOT ".repeat(n));
        let m = tfu();
        assert_eq!(sel(&nots(63)).eval(&m), Tri::False);
        assert_eq!(sel(&nots(62)).eval(&m), Tri::True);
        err(&nots(64));
        err(&nots(1000));
        // Parenthesis nesting.
        let parens = |n: usize| format!("{}t{}", "(".repeat(n), ")".repeat(n));
        assert!(sel(&parens(MAX_PAREN_DEPTH)).matches(&m));
        assert!(err(&parens(MAX_PAREN_DEPTH + 1)).contains("deep"));
        err(&parens(2000));
        err(&format!("{}t", "(".repeat(4000)));
        // Right-nested structure: (t AND (t AND (...))).
        let nested = |n: usize| format!("{}t{}", "(t AND ".repeat(n), ")".repeat(n));
        // 2n + 1 nodes.
        assert!(sel(&nested(31)).matches(&m));
        err(&nested(32));
    }

    /// Deterministic token soup: every input either parses or yields a short reason, and
    /// every parsed selector evaluates without panicking.
    #[test]
    fn random_token_soup_never_panics() {
        const VOCAB: &[&str] = &[
            "a",
            "b",
            "s",
            "n",
            "x",
            "t",
            "missing",
            "JMSPriority",
            "$v",
            "1",
            "0",
            "-1",
            "2.5",
            "1e3",
            "9223372036854775807",
            "'x'",
            "'%a_'",
            "''",
            "TRUE",
            "FALSE",
            "NULL",
            "NOT",
            "AND",
            "OR",
            "=",
            "<>",
            "<",
            ">",
            "<=",
            ">=",
            "+",
            "-",
            "*",
            "/",
            "(",
            ")",
            ",",
            "BETWEEN",
            "IN",
            "LIKE",
            "ESCAPE",
            "'!'",
            "IS",
            "%",
            "!",
            "\"",
            "f(",
            ".",
            ";",
            "--",
            "@",
        ];
        let msg = empty()
            .s("s", "xa_")
            .i("n", i64::MIN)
            .i("a", 0)
            .f("x", -0.0)
            .f("b", f64::MAX)
            .b("t", true)
            .i("JMSPriority", 4)
            .s("$v", "x");
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut parsed = 0;
        for _ in 0..4000 {
            let len = 1 + (next() % 14) as usize;
            let text: Vec<&str> = (0..len).map(|_| VOCAB[(next() % VOCAB.len() as u64) as usize]).collect();
            let text = text.join(" ");
            match Selector::parse(&text) {
                Ok(s) => {
                    parsed += 1;
                    let _ = s.matches(&msg);
                    let _ = s.matches(&empty());
                }
                Err(e) => assert!(!e.is_empty() && e.len() <= MAX_ERROR_BYTES, "{e}"),
            }
        }
        assert!(parsed > 0);
    }

    #[test]
    fn hostile_inputs_do_not_panic() {
        let inputs = [
            "-".repeat(4000),
            format!("{}1 > 0", "- ".repeat(2000)),
            format!("{}1 > 0", "-(".repeat(1000)),
            format!("{}1 > 0", "+".repeat(4000)),
            "'".repeat(4001),
            "'".repeat(4000),
            "(".repeat(4096),
            ")".repeat(4096),
            "NOT ".repeat(1024),
            "a IN (".to_owned() + "'x',".repeat(800).as_str() + "'x')",
            "\u{0}".repeat(100),
            "a = 1 \u{feff}".to_owned(),
            "a LIKE '%' ESCAPE '%'".to_owned(),
            "ü".repeat(2048),
            "a = 9".to_owned() + "9".repeat(4000).as_str(),
            "a = 1.".to_owned() + "9".repeat(4000).as_str(),
            "a = 1e99999999999999999999".to_owned(),
            "$".repeat(100),
        ];
        for text in &inputs {
            let _ = Selector::parse(text);
        }
    }

    /// A LIKE that runs out of the budget is UNKNOWN, and the other side of its OR is
    /// still read when it costs nothing: both orders agree (before, every read after
    /// the budget ran out was UNKNOWN, so the first order missed the message).
    #[test]
    fn a_costly_like_leaves_cheap_reads_to_the_rest_of_the_selector() {
        let m = empty().s("s", &"a".repeat(1 << 20)).i("n", 5).s("t", "x");
        let like = format!("s LIKE '%{}b%'", "a".repeat(4000));
        unknown(&like, &m);
        yes(&format!("{like} OR n = 5"), &m);
        yes(&format!("n = 5 OR {like}"), &m);
        yes(&format!("{like} OR JMSPriority = 4 OR n = 5"), &m);
        no(&format!("{like} AND n = 6"), &m);
        // A string read past the budget is still UNKNOWN.
        unknown(&format!("{like} OR t = 'x'"), &m);
    }
}
