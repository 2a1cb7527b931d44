//! One table per enum for its wire strings: [`wire_enum!`] defines the enum, `as_str`, `parse`,
//! `ALL`, `Display` and serde (as the wire string) from a single list of `Variant = "wire"`
//! pairs, so REST, SQL and logs can never spell a state two ways.

/// Defines a fieldless enum whose wire form is a string, from one `Variant = "wire"` table.
///
/// Serde writes the wire string and reads it back; an unknown string is rejected with serde's
/// usual `unknown variant` message listing the accepted ones.
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Every wire string, in declaration order.
            pub const WIRE: &'static [&'static str] = &[$($wire),+];

            /// The wire string.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire ),+
                }
            }

            /// Parses a wire string (`None` for anything else).
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $( $wire => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        #[cfg(feature = "openapi")]
        impl ::utoipa::PartialSchema for $name {
            fn schema() -> ::utoipa::openapi::RefOr<::utoipa::openapi::schema::Schema> {
                ::utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(::utoipa::openapi::schema::Type::String)
                    .enum_values(Some($name::WIRE.iter().copied()))
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl ::utoipa::ToSchema for $name {}

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                $name::parse(&s)
                    .ok_or_else(|| <D::Error as ::serde::de::Error>::unknown_variant(&s, $name::WIRE))
            }
        }
    };
}

#[cfg(test)]
mod tests {
    crate::wire_enum! {
        /// A test enum.
        pub enum Color {
            /// Red.
            Red = "red",
            /// Dark blue.
            DarkBlue = "dark.blue",
        }
    }

    #[test]
    fn one_table_for_every_spelling() {
        for c in Color::ALL {
            assert_eq!(Color::parse(c.as_str()), Some(*c));
            let json = serde_json::to_string(c).expect("serialize");
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Color>(&json).expect("parse"), *c);
        }
        assert_eq!(Color::DarkBlue.to_string(), "dark.blue");
        let err = serde_json::from_str::<Color>("\"green\"").expect_err("unknown");
        assert!(err.to_string().contains("unknown variant `green`"), "{err}");
    }
}
