//! A `*_env` field that takes one variable name or a list of them
//! (`secrets_env`, `admin.token_env`): each name with where it is written
//! and the field that names it in a message (`field`, or `field[i]` in a
//! list).

use std::ops::Range;

use toml::Spanned;

use crate::config::file::EnvNamesFile;

pub struct Listed {
    /// As written: `env_name` is still to check it.
    pub name: String,
    pub span: Range<usize>,
    pub field: String,
}

pub fn listed(names: &Spanned<EnvNamesFile>, field: &str) -> Vec<Listed> {
    match names.get_ref() {
        EnvNamesFile::One(name) => vec![Listed {
            name: name.clone(),
            span: names.span(),
            field: field.to_owned(),
        }],
        EnvNamesFile::Many(list) => (list.iter().enumerate())
            .map(|(i, name)| Listed {
                name: name.get_ref().clone(),
                span: name.span(),
                field: format!("{field}[{i}]"),
            })
            .collect(),
    }
}
