//! How a backend hands an operation the arguments of a [`RetrievalStore`] call: each one is
//! carried as an owned value ([`Carry`]: SQLite runs the operation on another thread, so it must
//! own what it reads) and lent back in the form the operation takes ([`Lend`]). A value the call
//! already owns (an upload's bytes, a file's chunks) is moved, never copied.
//!
//! [`RetrievalStore`]: respgw_store_api::RetrievalStore

use respgw_store_api::retrieval::{
    EmbeddingSpace, FileFilter, FileRecord, IngestionError, IngestionJob, NewVectorStore, Page, VectorStoreUpdate,
};

/// An argument as something `Send + 'static`.
pub(crate) trait Carry {
    type Owned: Lend + Send + 'static;
    fn carry(self) -> Self::Owned;
}

/// A carried argument as the operation takes it.
pub(crate) trait Lend {
    type Out<'a>
    where
        Self: 'a;
    fn lend(&self) -> Self::Out<'_>;
}

impl Carry for &str {
    type Owned = String;
    fn carry(self) -> String {
        self.to_owned()
    }
}

impl Lend for String {
    type Out<'a> = &'a str;
    fn lend(&self) -> &str {
        self
    }
}

impl<T: Clone + Send + 'static> Carry for &[T] {
    type Owned = Vec<T>;
    fn carry(self) -> Vec<T> {
        self.to_vec()
    }
}

impl<T: Send + 'static> Carry for Vec<T> {
    type Owned = Vec<T>;
    fn carry(self) -> Vec<T> {
        self
    }
}

impl<T> Lend for Vec<T> {
    type Out<'a>
        = &'a [T]
    where
        T: 'a;
    fn lend(&self) -> &[T] {
        self
    }
}

impl<T: Carry> Carry for Option<T> {
    type Owned = Option<T::Owned>;
    fn carry(self) -> Self::Owned {
        self.map(T::carry)
    }
}

impl<T: Lend> Lend for Option<T> {
    type Out<'a>
        = Option<T::Out<'a>>
    where
        T: 'a;
    fn lend(&self) -> Self::Out<'_> {
        self.as_ref().map(T::lend)
    }
}

/// Numbers are copied.
macro_rules! copied {
    ($($t:ty),*) => {$(
        impl Carry for $t {
            type Owned = $t;
            fn carry(self) -> $t {
                self
            }
        }

        impl Lend for $t {
            type Out<'a> = $t;
            fn lend(&self) -> $t {
                *self
            }
        }
    )*};
}

/// Records are moved when owned, cloned when borrowed, and lent by reference.
macro_rules! records {
    ($($t:ty),*) => {$(
        impl Carry for $t {
            type Owned = $t;
            fn carry(self) -> $t {
                self
            }
        }

        impl Carry for &$t {
            type Owned = $t;
            fn carry(self) -> $t {
                self.clone()
            }
        }

        impl Lend for $t {
            type Out<'a> = &'a $t;
            fn lend(&self) -> &$t {
                self
            }
        }
    )*};
}

copied!(i64, usize);
records!(
    FileRecord,
    NewVectorStore,
    VectorStoreUpdate,
    Page,
    FileFilter,
    IngestionJob,
    IngestionError,
    EmbeddingSpace,
    serde_json::Value
);
