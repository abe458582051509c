//! The model of an annotated fn, between parsing and expansion: the fn as
//! read ([`Func`]), which resilience attributes it carries and what each
//! says ([`Layer`]), and what the expansion needs to know of the fn
//! ([`Context`]). It imports
//! nothing of the parsing or the expansion; both import it.

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::{Attribute, LitStr, Path};

/// An annotated fn as the attribute reads it: the signature parsed, the
/// body passed through as tokens (nothing in it needs reading, and parsing
/// it costs most of the attribute's own time on a long body).
pub(crate) struct Func {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: syn::Visibility,
    pub(crate) sig: syn::Signature,
    /// The body, braces included.
    pub(crate) body: proc_macro2::Group,
}

impl Func {
    /// What the body's leading inner attributes (`#![allow(..)]`, `//!`)
    /// hold between their brackets, and the rest of the body.
    pub(crate) fn split_body(&self) -> (Vec<TokenStream>, TokenStream) {
        let trees: Vec<TokenTree> = self.body.stream().into_iter().collect();
        let mut at = 0;
        while let (
            Some(TokenTree::Punct(hash)),
            Some(TokenTree::Punct(bang)),
            Some(TokenTree::Group(g)),
        ) = (trees.get(at), trees.get(at + 1), trees.get(at + 2))
        {
            if hash.as_char() != '#'
                || bang.as_char() != '!'
                || g.delimiter() != proc_macro2::Delimiter::Bracket
            {
                break;
            }
            at += 3;
        }
        let mut trees = trees;
        let rest: TokenStream = trees.split_off(at).into_iter().collect();
        let groups = trees
            .into_iter()
            .filter_map(|t| match t {
                TokenTree::Group(g) => Some(g.stream()),
                _ => None,
            })
            .collect();
        (groups, rest)
    }

    /// The fn with `body` (tokens without braces) in place of its body,
    /// in braces spanned as the original ones, so that the fn's span stays
    /// in the user's code and lints on the fn as a whole (`dead_code`)
    /// still fire.
    pub(crate) fn with_body(&self, body: TokenStream) -> TokenStream {
        let Func {
            attrs, vis, sig, ..
        } = self;
        let mut group = proc_macro2::Group::new(proc_macro2::Delimiter::Brace, body);
        group.set_span(self.body.span());
        quote::quote!(#(#attrs)* #vis #sig #group)
    }
}

/// A resilience mechanism, as named by its attribute.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Retry,
    CircuitBreaker,
    Timeout,
    ConcurrencyLimit,
    RateLimiter,
    Fallback,
    Chaos,
    Hedging,
}

impl Kind {
    const ALL: [Kind; 8] = [
        Kind::Retry,
        Kind::CircuitBreaker,
        Kind::Timeout,
        Kind::ConcurrencyLimit,
        Kind::RateLimiter,
        Kind::Fallback,
        Kind::Chaos,
        Kind::Hedging,
    ];

    pub(crate) fn attr_name(self) -> &'static str {
        match self {
            Kind::Retry => "retryable",
            Kind::CircuitBreaker => "circuit_breakable",
            Kind::Timeout => "timeout",
            Kind::ConcurrencyLimit => "concurrency_limit",
            Kind::RateLimiter => "rate_limited",
            Kind::Fallback => "fallback",
            Kind::Chaos => "chaos",
            Kind::Hedging => "hedged",
        }
    }

    pub(crate) fn derive_name(self) -> &'static str {
        match self {
            Kind::Retry => "RetrySpec",
            Kind::CircuitBreaker => "CircuitBreakerSpec",
            Kind::Timeout => "TimeoutSpec",
            Kind::ConcurrencyLimit => "ConcurrencyLimitSpec",
            Kind::RateLimiter => "RateLimiterSpec",
            Kind::Chaos => "ChaosSpec",
            Kind::Hedging => "HedgingSpec",
            Kind::Fallback => "",
        }
    }

    pub(crate) fn example_spec(self) -> &'static str {
        match self {
            Kind::Retry => "PetRetry",
            Kind::CircuitBreaker => "PetBreaker",
            Kind::Timeout => "PetTimeout",
            Kind::ConcurrencyLimit => "Reviews",
            Kind::RateLimiter => "PetRate",
            Kind::Chaos => "PetChaos",
            Kind::Hedging => "PetHedging",
            Kind::Fallback => "",
        }
    }

    /// The config path of [`example_spec`](Self::example_spec), as the guide writes it.
    pub(crate) fn example_path(self) -> &'static str {
        match self {
            Kind::Retry => "resilient.retry.pet",
            Kind::CircuitBreaker => "resilient.circuitbreaker.pet",
            Kind::Timeout => "resilient.timeout.pet",
            Kind::ConcurrencyLimit => "resilient.concurrency.reviews",
            Kind::RateLimiter => "resilient.ratelimiter.pet",
            Kind::Chaos => "resilient.chaos.pet",
            Kind::Hedging => "resilient.hedging.pet",
            Kind::Fallback => "",
        }
    }

    /// Whether the attribute takes `key = ..` (one instance per key).
    pub(crate) fn keyed(self) -> bool {
        matches!(
            self,
            Kind::CircuitBreaker | Kind::ConcurrencyLimit | Kind::RateLimiter
        )
    }

    /// What one instance of a keyed attribute's spec is called, as in
    /// "one breaker per host".
    pub(crate) fn instance_name(self) -> &'static str {
        match self {
            Kind::CircuitBreaker => "breaker",
            Kind::ConcurrencyLimit => "concurrency limit",
            Kind::RateLimiter => "rate limiter",
            Kind::Retry | Kind::Timeout | Kind::Fallback | Kind::Chaos | Kind::Hedging => {
                "instance"
            }
        }
    }

    /// Whether the layer may run what is inside it more than once, so that the
    /// body must be callable again with fresh arguments.
    pub(crate) fn calls_again(self) -> bool {
        match self {
            Kind::Retry | Kind::Hedging => true,
            Kind::CircuitBreaker
            | Kind::Timeout
            | Kind::ConcurrencyLimit
            | Kind::RateLimiter
            | Kind::Fallback
            | Kind::Chaos => false,
        }
    }

    /// The mechanism an attribute names: a bare name or any path ending in it.
    pub(crate) fn of(attr: &Attribute) -> Option<Kind> {
        let last = attr.path().segments.last()?;
        Kind::ALL.into_iter().find(|k| last.ident == k.attr_name())
    }
}

/// One resilience attribute of the fn.
pub(crate) struct Layer {
    pub(crate) kind: Kind,
    pub(crate) args: LayerArgs,
}

/// What the attribute says.
pub(crate) enum LayerArgs {
    /// The spec type of a mechanism: `#[retryable(PetRetry)]`.
    Spec(Path),
    /// `#[chaos(PetChaos, outcome = unavailable)]`: the spec, and the fn
    /// whose output replaces a call's outcome, if named.
    Chaos { spec: Path, outcome: Option<Path> },
    /// `#[circuit_breakable(HostBreaker, key = host)]`: the spec, and the
    /// expression whose value picks the instance.
    Keyed { spec: Path, key: syn::Expr },
    /// `#[fallback(method = "..", ..)]`.
    Fallback(FallbackArgs),
}

impl Layer {
    /// The spec type, for the layers that have one.
    pub(crate) fn spec(&self) -> Option<&Path> {
        match &self.args {
            LayerArgs::Spec(spec)
            | LayerArgs::Chaos { spec, .. }
            | LayerArgs::Keyed { spec, .. } => Some(spec),
            LayerArgs::Fallback(_) => None,
        }
    }

    /// The `key = ..` expression, for a keyed layer.
    pub(crate) fn key(&self) -> Option<&syn::Expr> {
        match &self.args {
            LayerArgs::Keyed { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// What `#[fallback(..)]` says.
pub(crate) struct FallbackArgs {
    /// The `method = ".."` string, for spans.
    pub(crate) method: LitStr,
    /// The fallback's path, as written in the string.
    pub(crate) target: Path,
    /// The argument names listed in the string, in order.
    pub(crate) args: Vec<syn::Ident>,
    /// Which failures it handles.
    pub(crate) on: FallbackOn,
    /// `on = ..` as written, for spans; `None` without it.
    pub(crate) on_written: Option<TokenStream>,
}

/// Which failures a fallback handles.
pub(crate) enum FallbackOn {
    Any,
    Resilience,
    Rejection,
    Timeout,
    When(Path),
}

/// What the layers need to know of the fn they wrap.
pub(crate) struct Context {
    /// The fn's return type.
    pub(crate) ret: TokenStream,
    /// Whether a layer runs the body more than once.
    pub(crate) again: bool,
    /// The fn's receiver, if it is a method.
    pub(crate) receiver: Option<Receiver>,
    /// Where the receiver's `self` is written (the call site without one).
    pub(crate) self_span: proc_macro2::Span,
    /// The fn's name.
    pub(crate) fn_name: Ident,
    /// Whether the fn is a plain fn (no `async`): its waits block the
    /// thread, its body is a closure called in place.
    pub(crate) blocking: bool,
}

/// How a method takes `self`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Receiver {
    /// `&self` (or `self: &Self`): copied.
    Ref,
    /// `self`, `self: Arc<Self>` and the like: cloned.
    Owned,
}

/// Where to report a problem with a spec: its last segment (`PetRetry` in
/// `crate::specs::PetRetry`), since stable Rust cannot join the segments.
pub(crate) fn spec_span(spec: &syn::Path) -> Span {
    spec.segments
        .last()
        .map_or_else(|| spec.span(), |s| s.ident.span())
}
