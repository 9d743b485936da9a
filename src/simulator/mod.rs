//! A faithful local IMDS: scheduled events, instance metadata, a control API and fault injection.
