//! Chat templates: a conversation rendered into the prompt text a model was trained on.
//!
//! The GGUF's `tokenizer.chat_template` (a Hugging Face Jinja template) is compiled once per
//! model with minijinja (Python string methods via minijinja-contrib's pycompat). Models that
//! carry none fall back to Gemma's turn format for Gemma architectures and ChatML otherwise.
//! Key types: [`ChatTemplate`], [`TemplateMessage`]. Cost: one render per request, microseconds.

use serde::Serialize;

/// One message as templates expect it (the Hugging Face shape).
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct TemplateMessage {
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl TemplateMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into(), ..Default::default() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("the model's chat template does not compile: {0}")]
    Compile(String),
    #[error("the model's chat template failed to render this conversation: {0}")]
    Render(String),
}

/// Which template a model uses, compiled once.
#[derive(Debug)]
pub enum ChatTemplate {
    Jinja { env: minijinja::Environment<'static>, mentions_tools: bool },
    ChatMl,
    GemmaTurns,
}

const TEMPLATE_NAME: &str = "chat";

impl ChatTemplate {
    /// Compiles `source` (from the GGUF); without one, picks the fallback for `architecture`.
    pub fn new(source: Option<&str>, architecture: &str) -> Result<Self, TemplateError> {
        let Some(source) = source.filter(|s| !s.trim().is_empty()) else {
            return Ok(if architecture.starts_with("gemma") {
                ChatTemplate::GemmaTurns
            } else {
                ChatTemplate::ChatMl
            });
        };
        let mut env = minijinja::Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", |message: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message))
        });
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| TemplateError::Compile(e.to_string()))?;
        Ok(ChatTemplate::Jinja { env, mentions_tools: source.contains("tools") })
    }

    /// Whether the template itself knows how to describe tools to the model.
    pub fn handles_tools(&self) -> bool {
        matches!(self, ChatTemplate::Jinja { mentions_tools: true, .. })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ChatTemplate::Jinja { .. } => "gguf",
            ChatTemplate::ChatMl => "chatml",
            ChatTemplate::GemmaTurns => "gemma",
        }
    }

    /// Renders `messages`, ending with the cue for the assistant's turn.
    pub fn render(
        &self,
        messages: &[TemplateMessage],
        tools: Option<&[serde_json::Value]>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String, TemplateError> {
        match self {
            ChatTemplate::Jinja { env, .. } => {
                let template =
                    env.get_template(TEMPLATE_NAME).map_err(|e| TemplateError::Render(e.to_string()))?;
                let context = minijinja::context! {
                    messages => messages,
                    tools => tools,
                    add_generation_prompt => true,
                    bos_token => bos_token,
                    eos_token => eos_token,
                };
                template.render(context).map_err(|e| TemplateError::Render(format!("{e:#}")))
            }
            ChatTemplate::ChatMl => Ok(render_chatml(messages)),
            ChatTemplate::GemmaTurns => Ok(render_gemma(messages)),
        }
    }
}

fn render_chatml(messages: &[TemplateMessage]) -> String {
    let mut out = String::new();
    for message in messages {
        out.push_str("<|im_start|>");
        out.push_str(&message.role);
        out.push('\n');
        out.push_str(&message.content);
        out.push_str("<|im_end|>\n");
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

/// Gemma has no system role: system text opens the first user turn, as Gemma's own template does.
fn render_gemma(messages: &[TemplateMessage]) -> String {
    let mut out = String::new();
    let mut system = String::new();
    for message in messages {
        let role = match message.role.as_str() {
            "system" | "developer" => {
                system.push_str(&message.content);
                system.push_str("\n\n");
                continue;
            }
            "assistant" => "model",
            _ => "user",
        };
        out.push_str("<start_of_turn>");
        out.push_str(role);
        out.push('\n');
        if role == "user" && !system.is_empty() {
            out.push_str(&std::mem::take(&mut system));
        }
        out.push_str(message.content.trim());
        out.push_str("<end_of_turn>\n");
    }
    out.push_str("<start_of_turn>model\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation() -> Vec<TemplateMessage> {
        vec![TemplateMessage::new("system", "Be brief."), TemplateMessage::new("user", "Hi")]
    }

    #[test]
    fn gemma_fallback_folds_the_system_prompt_into_the_first_user_turn() {
        let template = ChatTemplate::new(None, "gemma3").unwrap();
        let text = template.render(&conversation(), None, "<bos>", "<eos>").unwrap();
        assert_eq!(
            text,
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn chatml_fallback_for_other_architectures() {
        let template = ChatTemplate::new(Some("  "), "llama").unwrap();
        let text = template.render(&conversation(), None, "", "").unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn jinja_templates_get_python_string_methods_and_raise_exception() {
        let source = "{% for m in messages %}{% if m.role not in ['system','user'] %}{{ raise_exception('bad role') }}{% endif %}[{{ m.role.upper() }}]{{ m.content.strip() }}{% endfor %}{% if add_generation_prompt %}[A]{% endif %}";
        let template = ChatTemplate::new(Some(source), "llama").unwrap();
        assert_eq!(template.render(&conversation(), None, "", "").unwrap(), "[SYSTEM]Be brief.[USER]Hi[A]");
        let error = template
            .render(&[TemplateMessage::new("robot", "x")], None, "", "")
            .unwrap_err();
        assert!(error.to_string().contains("bad role"), "{error}");
    }

    #[test]
    fn a_broken_template_is_an_error_not_a_panic() {
        assert!(matches!(ChatTemplate::new(Some("{% for %}"), "llama"), Err(TemplateError::Compile(_))));
    }
}
