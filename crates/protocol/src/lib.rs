//! What both ends of Azure's Instance Metadata Service exchange agree on, shared by the agent and
//! its simulator: the documents' JSON as Azure writes it ([`wire`], with the `Resources` list in
//! [`resources`]), what each scheduled-events api-version shows ([`api_version`]), and the HTTP/1
//! serving both of the project's servers use (`http`, with the feature of that name).

pub mod api_version;
#[cfg(feature = "http")]
pub mod http;
pub mod resources;
pub mod wire;
