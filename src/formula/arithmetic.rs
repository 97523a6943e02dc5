//! The arithmetic of formula transforms: `I(age^2)`, `log(x)`, read into
//! SQL, and how a column name is written in SQL ([`quote_ident`]).

/// The functions a term may apply to a numeric expression, and their SQL.
pub(super) const FUNCTIONS: &[&str] = &["log", "exp", "sqrt", "log10", "log2", "abs"];

/// A column name as a quoted SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A numeric expression over columns (`I(...)`, `log(...)`), read into SQL.
pub(super) struct Arithmetic<'a> {
    text: &'a str,
    chars: Vec<char>,
    at: usize,
    columns: &'a mut Vec<String>,
}

impl<'a> Arithmetic<'a> {
    pub(super) fn new(text: &'a str, columns: &'a mut Vec<String>) -> Self {
        Self {
            text,
            chars: text.chars().collect(),
            at: 0,
            columns,
        }
    }

    pub(super) fn parse(mut self) -> Result<String, String> {
        let sql = self.sum()?;
        self.skip_space();
        if self.at < self.chars.len() {
            return Err(self.unexpected());
        }
        Ok(sql)
    }

    fn unexpected(&self) -> String {
        let rest: String = self.chars[self.at.min(self.chars.len())..].iter().collect();
        if rest.is_empty() {
            format!("`{}` ends too early", self.text)
        } else {
            format!(
                "cannot read `{}` at `{rest}` (an expression takes columns, numbers, + - * / ^, parentheses and {})",
                self.text,
                FUNCTIONS.join(", ")
            )
        }
    }

    fn skip_space(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.chars.get(self.at).copied()
    }

    fn sum(&mut self) -> Result<String, String> {
        let mut sql = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            self.at += 1;
            sql = format!("({sql} {op} {})", self.product()?);
        }
        Ok(sql)
    }

    fn product(&mut self) -> Result<String, String> {
        let mut sql = self.power()?;
        while let Some(op @ ('*' | '/')) = self.peek() {
            self.at += 1;
            sql = format!("({sql} {op} {})", self.power()?);
        }
        Ok(sql)
    }

    fn power(&mut self) -> Result<String, String> {
        let base = self.unary()?;
        if self.peek() == Some('^') {
            self.at += 1;
            // Right-associative, as in R: a^b^c = a^(b^c).
            let exponent = self.power()?;
            return Ok(format!("power({base}, {exponent})"));
        }
        Ok(base)
    }

    fn unary(&mut self) -> Result<String, String> {
        match self.peek() {
            Some('-') => {
                self.at += 1;
                Ok(format!("(- {})", self.unary()?))
            }
            Some('+') => {
                self.at += 1;
                self.unary()
            }
            _ => self.primary(),
        }
    }

    fn primary(&mut self) -> Result<String, String> {
        match self.peek() {
            Some('(') => {
                self.at += 1;
                let sql = self.sum()?;
                self.close()?;
                Ok(sql)
            }
            Some('"') => {
                let end = self.chars[self.at + 1..]
                    .iter()
                    .position(|&c| c == '"')
                    .ok_or_else(|| format!("`{}`: an unclosed quote", self.text))?;
                let name: String = self.chars[self.at + 1..self.at + 1 + end].iter().collect();
                self.at += end + 2;
                Ok(self.column(name))
            }
            Some(c) if c.is_ascii_digit() || c == '.' => {
                let start = self.at;
                while self
                    .chars
                    .get(self.at)
                    .is_some_and(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E'))
                    || (matches!(self.chars.get(self.at), Some('+' | '-'))
                        && matches!(self.chars.get(self.at - 1), Some('e' | 'E')))
                {
                    self.at += 1;
                }
                let number: String = self.chars[start..self.at].iter().collect();
                number
                    .parse::<f64>()
                    .map_err(|_| format!("`{number}` in `{}` is not a number", self.text))?;
                Ok(format!("CAST({number} AS DOUBLE)"))
            }
            Some(c) if c.is_alphabetic() || c == '_' => {
                let start = self.at;
                while self
                    .chars
                    .get(self.at)
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
                {
                    self.at += 1;
                }
                let name: String = self.chars[start..self.at].iter().collect();
                if self.peek() != Some('(') {
                    return Ok(self.column(name));
                }
                self.at += 1;
                let argument = self.sum()?;
                self.close()?;
                let sql = match name.as_str() {
                    "I" => return Ok(argument),
                    "log" => "ln",
                    "exp" => "exp",
                    "sqrt" => "sqrt",
                    "log10" => "log10",
                    "log2" => "log2",
                    "abs" => "abs",
                    other => {
                        return Err(format!(
                            "`{other}(...)` in `{}` is not a known function (use {}, or I(...) for arithmetic)",
                            self.text,
                            FUNCTIONS.join(", ")
                        ));
                    }
                };
                Ok(format!("{sql}({argument})"))
            }
            _ => Err(self.unexpected()),
        }
    }

    fn close(&mut self) -> Result<(), String> {
        if self.peek() == Some(')') {
            self.at += 1;
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    fn column(&mut self, name: String) -> String {
        let sql = format!("CAST({} AS DOUBLE)", quote_ident(&name));
        if !self.columns.contains(&name) {
            self.columns.push(name);
        }
        sql
    }
}
