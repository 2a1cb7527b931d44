//! Dockerfile word expansion, as Docker does it for `ENV`, `ARG`, `WORKDIR`, `USER`, `COPY`,
//! `LABEL`, `EXPOSE` and `FROM`: `$NAME`, `${NAME}`, `${NAME:-word}` / `${NAME-word}` (a
//! default when unset or empty / unset), `${NAME:+word}` / `${NAME+word}` (the word when set
//! and non-empty / set), `${NAME:?word}` / `${NAME?word}` (an error when unset), backslash
//! escapes (`\$`, `\\`, `\ `), and quote removal (`'…'` is literal, `"…"` expands). An unset
//! name expands to nothing. The words of a file build reach the node as written; the node
//! expands them against the build's environment: the parent's `ENV` (a template release's
//! environment, or an OCI image's config), then the file's `ARG`s and `ENV`s in order, an
//! `ENV` winning over an `ARG` of the same name.

use std::collections::BTreeMap;

/// Longest expansion of one word, in bytes (Linux's limit for one argument or environment
/// string, `MAX_ARG_STRLEN`).
pub const MAX_WORD_BYTES: usize = 128 * 1024;
/// Deepest nesting of `${…}` inside `${…}`.
const MAX_DEPTH: usize = 8;

/// Why a word does not expand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// `${` without its `}`, or a quote without its end.
    #[error("unterminated {0}")]
    Unterminated(&'static str),
    /// `${}` or `${NAME…}` with a character that is not an operator.
    #[error("bad substitution in ${{{0}}}")]
    BadSubstitution(String),
    /// `${NAME:?message}` of an unset name.
    #[error("{name}: {message}")]
    Required {
        /// The variable.
        name: String,
        /// Its message (or "is not set").
        message: String,
    },
    /// The result is over [`MAX_WORD_BYTES`].
    #[error("expands to more than {MAX_WORD_BYTES} bytes")]
    TooLong,
    /// `${…}` nested deeper than the bound.
    #[error("${{…}} nested too deep")]
    TooDeep,
}

/// The variables a word sees: the build's environment and arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vars<'a> {
    /// `ENV` values (the parent's, then the file's).
    pub env: Option<&'a BTreeMap<String, String>>,
    /// `ARG` values (an `ENV` of the same name wins).
    pub args: Option<&'a BTreeMap<String, String>>,
}

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.env
            .and_then(|e| e.get(name))
            .or_else(|| self.args.and_then(|a| a.get(name)))
            .map(String::as_str)
    }
}

/// Expands one word (quotes removed, escapes applied).
///
/// # Errors
/// [`ExpandError`] for an unterminated `${` or quote, a bad `${…}`, a `${NAME:?}` of an unset
/// name, or a result over [`MAX_WORD_BYTES`].
pub fn expand(word: &str, vars: &Vars<'_>) -> Result<String, ExpandError> {
    let chars: Vec<char> = word.chars().collect();
    let mut pos = 0;
    let out = expand_until(&chars, &mut pos, vars, None, 0)?;
    Ok(out)
}

/// Quotes `value` so that [`expand`] gives it back unchanged (a `--build-arg` value is
/// literal).
pub fn literal(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        if matches!(c, '\\' | '$' | '"' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn push(out: &mut String, s: &str) -> Result<(), ExpandError> {
    if out.len() + s.len() > MAX_WORD_BYTES {
        return Err(ExpandError::TooLong);
    }
    out.push_str(s);
    Ok(())
}

fn push_char(out: &mut String, c: char) -> Result<(), ExpandError> {
    if out.len() + c.len_utf8() > MAX_WORD_BYTES {
        return Err(ExpandError::TooLong);
    }
    out.push(c);
    Ok(())
}

/// Expands from `pos` until `stop` (unquoted, at this level) or the end; leaves `pos` on the
/// stop character.
fn expand_until(
    chars: &[char],
    pos: &mut usize,
    vars: &Vars<'_>,
    stop: Option<char>,
    depth: usize,
) -> Result<String, ExpandError> {
    if depth > MAX_DEPTH {
        return Err(ExpandError::TooDeep);
    }
    let mut out = String::new();
    while let Some(&c) = chars.get(*pos) {
        if Some(c) == stop {
            return Ok(out);
        }
        *pos += 1;
        match c {
            '\\' => match chars.get(*pos) {
                Some(&next) => {
                    *pos += 1;
                    push_char(&mut out, next)?;
                }
                None => push_char(&mut out, '\\')?,
            },
            '\'' => loop {
                match chars.get(*pos) {
                    Some('\'') => {
                        *pos += 1;
                        break;
                    }
                    Some(&q) => {
                        *pos += 1;
                        push_char(&mut out, q)?;
                    }
                    None => return Err(ExpandError::Unterminated("single quote")),
                }
            },
            '"' => loop {
                match chars.get(*pos) {
                    Some('"') => {
                        *pos += 1;
                        break;
                    }
                    Some('\\') => {
                        *pos += 1;
                        match chars.get(*pos) {
                            Some(&n @ ('"' | '\\' | '$')) => {
                                *pos += 1;
                                push_char(&mut out, n)?;
                            }
                            _ => push_char(&mut out, '\\')?,
                        }
                    }
                    Some('$') => {
                        *pos += 1;
                        let v = dollar(chars, pos, vars, depth)?;
                        push(&mut out, &v)?;
                    }
                    Some(&q) => {
                        *pos += 1;
                        push_char(&mut out, q)?;
                    }
                    None => return Err(ExpandError::Unterminated("double quote")),
                }
            },
            '$' => {
                let v = dollar(chars, pos, vars, depth)?;
                push(&mut out, &v)?;
            }
            c => push_char(&mut out, c)?,
        }
    }
    if stop.is_some() {
        return Err(ExpandError::Unterminated("${"));
    }
    Ok(out)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// After a `$` (at `pos`): the substitution's value.
fn dollar(
    chars: &[char],
    pos: &mut usize,
    vars: &Vars<'_>,
    depth: usize,
) -> Result<String, ExpandError> {
    match chars.get(*pos) {
        Some('{') => {
            *pos += 1;
            let start = *pos;
            while chars.get(*pos).is_some_and(|c| is_name_char(*c)) {
                *pos += 1;
            }
            let name: String = chars[start..*pos].iter().collect();
            if name.is_empty() {
                return Err(ExpandError::BadSubstitution(String::new()));
            }
            let value = vars.get(&name);
            let op = match chars.get(*pos) {
                Some('}') => {
                    *pos += 1;
                    return Ok(value.unwrap_or("").to_string());
                }
                Some(':') => match chars.get(*pos + 1) {
                    Some(&o @ ('-' | '+' | '?')) => {
                        *pos += 2;
                        (true, o)
                    }
                    _ => return Err(ExpandError::BadSubstitution(name)),
                },
                Some(&o @ ('-' | '+' | '?')) => {
                    *pos += 1;
                    (false, o)
                }
                None => return Err(ExpandError::Unterminated("${")),
                Some(_) => return Err(ExpandError::BadSubstitution(name)),
            };
            let word = expand_until(chars, pos, vars, Some('}'), depth + 1)?;
            *pos += 1; // the `}`
            let set = match (op.0, value) {
                (true, Some(v)) => !v.is_empty(),
                (false, Some(_)) => true,
                (_, None) => false,
            };
            Ok(match op.1 {
                '-' if set => value.unwrap_or("").to_string(),
                '-' => word,
                '+' if set => word,
                '+' => String::new(),
                _ if set => value.unwrap_or("").to_string(),
                _ => {
                    return Err(ExpandError::Required {
                        name,
                        message: if word.is_empty() {
                            "is not set".into()
                        } else {
                            word
                        },
                    })
                }
            })
        }
        Some(c) if is_name_char(*c) => {
            let start = *pos;
            while chars.get(*pos).is_some_and(|c| is_name_char(*c)) {
                *pos += 1;
            }
            let name: String = chars[start..*pos].iter().collect();
            Ok(vars.get(&name).unwrap_or("").to_string())
        }
        _ => Ok("$".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> BTreeMap<String, String> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("EMPTY", ""),
            ("HOME", "/home/user"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn x(word: &str) -> String {
        let env = env();
        let args: BTreeMap<String, String> = [("V".to_string(), "1.2".to_string())].into();
        expand(
            word,
            &Vars {
                env: Some(&env),
                args: Some(&args),
            },
        )
        .expect(word)
    }

    #[test]
    fn names_braces_and_unset_names() {
        assert_eq!(x("/opt/tool/bin:$PATH"), "/opt/tool/bin:/usr/bin:/bin");
        assert_eq!(x("/opt/tool/bin:${PATH}"), "/opt/tool/bin:/usr/bin:/bin");
        assert_eq!(x("${HOME}/.local/bin"), "/home/user/.local/bin");
        assert_eq!(x("/opt/$V/x"), "/opt/1.2/x");
        assert_eq!(x("a${NOPE}b$NOPE"), "ab");
        assert_eq!(x("cost: 5$"), "cost: 5$");
        assert_eq!(x("$-x"), "$-x");
    }

    #[test]
    fn defaults_and_alternatives() {
        assert_eq!(x("${NOPE:-/usr/local}"), "/usr/local");
        assert_eq!(x("${EMPTY:-dflt}"), "dflt");
        assert_eq!(x("${EMPTY-dflt}"), "");
        assert_eq!(x("${NOPE-dflt}"), "dflt");
        assert_eq!(x("${HOME:-dflt}"), "/home/user");
        assert_eq!(x("${HOME:+set}"), "set");
        assert_eq!(x("${EMPTY:+set}"), "");
        assert_eq!(x("${EMPTY+set}"), "set");
        assert_eq!(x("${NOPE:+set}"), "");
        assert_eq!(x("${NOPE:-$HOME/x}"), "/home/user/x");
        assert_eq!(x("${NOPE:-${V}}"), "1.2");
        let env = env();
        let vars = Vars {
            env: Some(&env),
            args: None,
        };
        assert_eq!(
            expand("${NOPE:?give it}", &vars),
            Err(ExpandError::Required {
                name: "NOPE".into(),
                message: "give it".into()
            })
        );
        assert_eq!(expand("${HOME:?x}", &vars).as_deref(), Ok("/home/user"));
        assert!(matches!(
            expand("${PATH", &vars),
            Err(ExpandError::Unterminated(_))
        ));
        assert!(matches!(
            expand("${PATH%x}", &vars),
            Err(ExpandError::BadSubstitution(_))
        ));
        assert!(matches!(
            expand("${}", &vars),
            Err(ExpandError::BadSubstitution(_))
        ));
    }

    #[test]
    fn escapes_and_quotes() {
        assert_eq!(x(r"\$PATH"), "$PATH");
        assert_eq!(x(r"a\ b"), "a b");
        assert_eq!(x(r"a\\b"), r"a\b");
        assert_eq!(x("\"two words\""), "two words");
        assert_eq!(x("\"$HOME/x\""), "/home/user/x");
        assert_eq!(x("'$HOME'"), "$HOME");
        assert_eq!(x(r#""a\"b\$c\d""#), r#"a"b$c\d"#);
        assert!(matches!(
            expand("'open", &Vars::default()),
            Err(ExpandError::Unterminated(_))
        ));
        let tricky = "a$b\\c\"d'e ${f}";
        assert_eq!(
            expand(&literal(tricky), &Vars::default()).as_deref(),
            Ok(tricky)
        );
    }

    #[test]
    fn env_wins_over_args() {
        let env: BTreeMap<String, String> = [("A".to_string(), "env".to_string())].into();
        let args: BTreeMap<String, String> = [
            ("A".to_string(), "arg".to_string()),
            ("B".to_string(), "arg".to_string()),
        ]
        .into();
        let vars = Vars {
            env: Some(&env),
            args: Some(&args),
        };
        assert_eq!(expand("$A $B", &vars).as_deref(), Ok("env arg"));
    }

    #[test]
    fn results_are_bounded() {
        let big: BTreeMap<String, String> = [("B".to_string(), "x".repeat(64 * 1024))].into();
        let vars = Vars {
            env: Some(&big),
            args: None,
        };
        assert!(expand("$B", &vars).is_ok());
        assert_eq!(expand("$B$B$B", &vars), Err(ExpandError::TooLong));
        let deep = format!("{}x{}", "${N:-".repeat(20), "}".repeat(20));
        assert_eq!(expand(&deep, &vars), Err(ExpandError::TooDeep));
    }
}
