//! Model providers: the OpenAI and Anthropic wire formats against a mock HTTP server
//! (`mock`), capabilities, transport (retries, timeouts), hostile providers, structured
//! output, streaming, recorded runs replayed offline (`replay`), and a real model
//! server when one is running.

#[cfg(any(feature = "openai", feature = "anthropic"))]
mod agent;
#[cfg(feature = "anthropic")]
mod anthropic;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod capabilities;
#[cfg(all(feature = "openai", feature = "anthropic"))]
mod hostile;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod mock;
#[cfg(feature = "openai")]
mod openai;
mod output_modes;
#[cfg(feature = "openai")]
mod real_model;
#[cfg(feature = "openai")]
mod real_model_natural;
mod replay;
mod streaming;
mod structured_output;
#[cfg(all(feature = "openai", feature = "anthropic"))]
mod token_counts;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod transport;
