//! The interactive `llamay run -m MODEL`: a chat on the terminal, like `ollama run`.
//!
//! Each line typed is a user turn; the answer streams as it is generated and both stay in the
//! history, which is sent whole with the next turn (so the model sees the conversation).
//! `"""` opens and closes multi-line input; `/set NAME VALUE` changes a sampling setting or
//! the system message, `/show` prints the model and the settings, `/clear` forgets the
//! history, `/bye` (or Ctrl-D, or Ctrl-C at an empty prompt) leaves. Ctrl-C during an answer
//! stops it and keeps what was written, and the prompt comes back.
//!
//! Key types: [`Settings`], [`Command`], [`Assembler`] (pure, unit-tested) and [`chat`], which
//! drives them with a rustyline editor and the model actor. Cost: every turn re-sends the whole
//! conversation, so prompt time grows with it; `/clear` resets it.

use std::io::Write;
use std::process::ExitCode;

use llamay::actors::messages::{Generate, LoadedModel};
use llamay::actors::model::LlamaModelHandle;
use llamay::service::validate_local;
use llamay::core::{
    ChatMessage, Completion, Constraint, FinishReason, PromptInput, Role, SamplingParams,
    StreamEvent, UncheckedGenerateRequest,
};
use rustyline::error::ReadlineError;
use rustyline::{
    Cmd, ConditionalEventHandler, Event, EventContext, EventHandler, KeyEvent, Movement,
    RepeatCount,
};

use super::report::stats_line;
use crate::cli::CliError;

const PROMPT: &str = ">>> ";
const CONTINUATION: &str = "... ";
const FENCE: &str = "\"\"\"";

const HELP: &str = "\
Available commands:
  /set NAME VALUE   Set a setting: temperature, top_k, top_p, min_p, seed (a number or
                    'random'), num_predict, system (the rest of the line; empty clears it)
  /show             Show the model and the current settings
  /clear            Forget the conversation so far
  /bye              Leave (also Ctrl-D, or Ctrl-C at an empty prompt)
  /?, /help         This help

Use \"\"\" to begin and end a message of several lines.
Ctrl-C stops an answer; the conversation goes on.";

/// The settings `/set` changes; the flags of `llamay run` give their start values.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub temperature: f32,
    pub top_k: u32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    /// `None`: a new random seed each turn.
    pub seed: Option<u32>,
    pub num_predict: u32,
    pub system: Option<String>,
}

impl Settings {
    /// Applies `/set NAME VALUE`; returns the line to confirm it with.
    pub fn set(&mut self, name: &str, value: &str) -> Result<String, String> {
        let number = |what: &str| format!("'{name}' takes {what}, not '{value}'");
        match name {
            "temperature" => {
                self.temperature = value
                    .parse::<f32>()
                    .ok()
                    .filter(|t| t.is_finite() && *t >= 0.0)
                    .ok_or_else(|| number("a number of 0 or more"))?;
            }
            "top_k" => {
                self.top_k = value.parse().map_err(|_| number("a whole number of 0 or more"))?
            }
            "top_p" | "min_p" => {
                let parsed = value
                    .parse::<f32>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| number("a number from 0 to 1"))?;
                if name == "top_p" {
                    self.top_p = parsed;
                } else {
                    self.min_p = parsed;
                }
            }
            "seed" if matches!(value, "random" | "none") => self.seed = None,
            "seed" => {
                self.seed = Some(value.parse().map_err(|_| number("a whole number or 'random'"))?)
            }
            "num_predict" => {
                self.num_predict = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| number("a whole number of 1 or more"))?;
            }
            "system" if value.is_empty() => {
                self.system = None;
                return Ok("Cleared the system message.".into());
            }
            "system" => {
                self.system = Some(value.to_string());
                return Ok("Set the system message.".into());
            }
            _ => {
                return Err(format!(
                    "unknown setting '{name}'; the settings are temperature, top_k, top_p, \
                     min_p, seed, num_predict and system"
                ))
            }
        }
        Ok(format!("Set '{name}' to '{value}'."))
    }

    /// The settings, one per line, for `/show`.
    pub fn describe(&self) -> String {
        let seed = self.seed.map_or_else(|| "random".to_string(), |s| s.to_string());
        let system = self.system.as_deref().unwrap_or("(none)");
        format!(
            "  temperature     {}\n  top_k           {}\n  top_p           {}\n  min_p           {}\n  \
             seed            {seed}\n  num_predict     {}\n  system          {system}",
            self.temperature, self.top_k, self.top_p, self.min_p, self.num_predict
        )
    }

    fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k.min(i32::MAX as u32) as i32,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: 64,
            seed: self.seed,
            max_tokens: Some(self.num_predict),
        }
    }
}

/// One complete input: a message for the model or a command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Message(String),
    Bye,
    Clear,
    Help,
    Show,
    Set {
        name: String,
        value: String,
    },
    /// A command that is wrong; the text says how.
    Invalid(String),
}

impl Command {
    /// Reads a single typed line that is not part of a multi-line message.
    pub fn parse(line: &str) -> Option<Command> {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return None;
        }
        let Some(command) = trimmed.strip_prefix('/') else {
            return Some(Command::Message(line.to_string()));
        };
        let (word, rest) = command.split_once(char::is_whitespace).unwrap_or((command, ""));
        let rest = rest.trim();
        Some(match word {
            "bye" | "exit" => Command::Bye,
            "clear" => Command::Clear,
            "?" | "help" => Command::Help,
            "show" => Command::Show,
            "set" => {
                // `/set parameter temperature 0.2` is ollama's spelling of the same thing.
                let rest = rest.strip_prefix("parameter ").map_or(rest, str::trim_start);
                match rest.split_once(char::is_whitespace) {
                    Some((name, value)) => {
                        Command::Set { name: name.to_string(), value: value.trim().to_string() }
                    }
                    None if rest == "system" => {
                        Command::Set { name: "system".into(), value: String::new() }
                    }
                    None => Command::Invalid(
                        "usage: /set NAME VALUE (for example /set temperature 0.2)".into(),
                    ),
                }
            }
            _ => Command::Invalid(format!("unknown command '/{word}'; type /? for help")),
        })
    }
}

/// Gathers typed lines into complete inputs: a single line, or everything between `"""` and
/// the next line that ends with `"""`.
#[derive(Debug, Default)]
pub struct Assembler {
    /// The lines of an open multi-line message.
    open: Option<Vec<String>>,
}

impl Assembler {
    /// True while a `"""` message is open (the prompt shows `...`).
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Abandons an open multi-line message.
    pub fn reset(&mut self) {
        self.open = None;
    }

    /// Feeds one typed line; returns the input it completes, if any.
    pub fn feed(&mut self, line: &str) -> Option<Command> {
        if let Some(lines) = self.open.as_mut() {
            match line.trim_end().strip_suffix(FENCE) {
                Some(last) => {
                    lines.push(last.to_string());
                    let text = lines.join("\n");
                    self.open = None;
                    let text = text.trim_matches('\n').to_string();
                    (!text.trim().is_empty()).then_some(Command::Message(text))
                }
                None => {
                    lines.push(line.to_string());
                    None
                }
            }
        } else if let Some(first) = line.trim_start().strip_prefix(FENCE) {
            if let Some(whole) = first.trim_end().strip_suffix(FENCE) {
                return (!whole.trim().is_empty()).then(|| Command::Message(whole.to_string()));
            }
            self.open = Some(if first.is_empty() { Vec::new() } else { vec![first.to_string()] });
            None
        } else {
            Command::parse(line)
        }
    }
}

/// Ctrl-C clears a line that has text, and interrupts (leaves) at an empty one.
struct ClearOrInterrupt;

impl ConditionalEventHandler for ClearOrInterrupt {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext) -> Option<Cmd> {
        if ctx.line().is_empty() {
            Some(Cmd::Interrupt)
        } else {
            Some(Cmd::Kill(Movement::WholeBuffer))
        }
    }
}

/// What a chat needs besides the model.
pub struct ChatOptions {
    pub settings: Settings,
    pub constraint: Option<Constraint>,
    /// `-lexicon`/`-deny`, checked beside the constraint (compiled under it).
    pub lexicon: Option<std::sync::Arc<llamay::grammar::Lexicon>>,
    pub stats: bool,
}

/// Runs the chat until the user leaves.
pub fn chat(handle: &LlamaModelHandle, mut options: ChatOptions) -> Result<ExitCode, CliError> {
    let mut editor = rustyline::DefaultEditor::new()
        .map_err(|e| CliError::Usage(format!("cannot read the terminal: {e}")))?;
    editor
        .bind_sequence(KeyEvent::ctrl('C'), EventHandler::Conditional(Box::new(ClearOrInterrupt)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Model(format!("cannot start the event loop: {e}")))?;
    let mut history: Vec<ChatMessage> = Vec::new();
    let mut assembler = Assembler::default();
    println!("Chatting with {}. Type /? for help, /bye to leave.", handle.info().name);
    loop {
        let prompt = if assembler.is_open() { CONTINUATION } else { PROMPT };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) if assembler.is_open() => {
                assembler.reset();
                continue;
            }
            Err(ReadlineError::Interrupted | ReadlineError::Eof) => break,
            Err(e) => return Err(CliError::Usage(format!("cannot read the terminal: {e}"))),
        };
        let Some(command) = assembler.feed(&line) else { continue };
        if let Command::Message(text) = &command {
            let _ = editor.add_history_entry(text.as_str());
        }
        match command {
            Command::Bye => break,
            Command::Clear => {
                history.clear();
                println!("Cleared the conversation.");
            }
            Command::Help => println!("{HELP}"),
            Command::Show => {
                println!("{}", describe_model(handle));
                println!("{}", options.settings.describe());
                println!("  history         {} messages", history.len());
            }
            Command::Set { name, value } => match options.settings.set(&name, &value) {
                Ok(confirmation) => println!("{confirmation}"),
                Err(problem) => println!("{problem}"),
            },
            Command::Invalid(problem) => println!("{problem}"),
            Command::Message(text) => {
                turn(handle, &runtime, &options, &mut history, text)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One user message and the streamed answer; both join `history` unless the turn failed.
fn turn(
    handle: &LlamaModelHandle,
    runtime: &tokio::runtime::Runtime,
    options: &ChatOptions,
    history: &mut Vec<ChatMessage>,
    text: String,
) -> Result<(), CliError> {
    let mut messages = Vec::with_capacity(history.len() + 2);
    if let Some(system) = &options.settings.system {
        messages.push(ChatMessage::new(Role::System, system.clone()));
    }
    messages.extend(history.iter().cloned());
    messages.push(ChatMessage::new(Role::User, text.clone()));
    let request = UncheckedGenerateRequest::new(handle.info().name.clone(), PromptInput::Chat { messages, tools: Vec::new() })
        .with_sampling(options.settings.sampling());
    let submitted = validate_local(request, options.constraint.clone(), options.lexicon.clone())
        .and_then(|request| handle.submit(request));
    let generation = match submitted {
        Ok(generation) => generation,
        Err(error) => {
            println!("Error: {error}");
            if !history.is_empty() {
                println!("(/clear forgets the conversation so far)");
            }
            return Ok(());
        }
    };
    let streamed = runtime.block_on(stream(generation));
    let mut stdout = std::io::stdout().lock();
    if !streamed.answer.is_empty() && !streamed.answer.ends_with('\n') {
        let _ = stdout.write_all(b"\n");
    }
    let _ = stdout.write_all(b"\n");
    let _ = stdout.flush();
    drop(stdout);
    if let Some(FinishReason::Error(message)) =
        streamed.completion.as_ref().map(|c| &c.finish_reason)
    {
        println!("Error: generation failed: {message}");
        return Ok(());
    }
    if options.stats {
        if let Some(completion) = &streamed.completion {
            eprintln!("{}", stats_line(completion));
        }
    }
    // A stopped answer stays as far as it went: it is what the user saw.
    history.push(ChatMessage::new(Role::User, text));
    history.push(ChatMessage::new(Role::Assistant, streamed.answer));
    Ok(())
}

struct Streamed {
    answer: String,
    /// `None` when the user stopped it.
    completion: Option<Completion>,
}

/// Prints the answer as it comes until it ends or Ctrl-C stops it (dropping the generation
/// cancels it at the model's next step).
async fn stream(mut generation: llamay::actors::messages::Generation) -> Streamed {
    let mut streamed = Streamed { answer: String::new(), completion: None };
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut stdout = std::io::stdout();
    loop {
        tokio::select! {
            event = generation.events.recv() => match event {
                Some(StreamEvent::Delta { text }) => {
                    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
                    streamed.answer.push_str(&text);
                }
                Some(StreamEvent::Done(done)) => streamed.completion = Some(done),
                Some(StreamEvent::Logprobs { .. }) => {}
                None => break,
            },
            _ = &mut interrupted => {
                let _ = stdout.write_all(b"\n[stopped]");
                break;
            }
        }
    }
    streamed
}

fn describe_model(handle: &LlamaModelHandle) -> String {
    let info = handle.info();
    let model = handle.model();
    let template = match model.chat_template().kind() {
        "gguf" => "the model's own".to_string(),
        fallback => format!("{fallback} (the file has none)"),
    };
    format!(
        "  model           {}\n  architecture    {}\n  parameters      {}\n  quantization    {}\n  \
         context         {} tokens (trained on {})\n  size            {}\n  digest          {}\n  \
         chat template   {template}",
        info.name,
        info.architecture,
        info.parameter_count,
        info.quantization,
        info.context_length,
        info.trained_context_length,
        llamay::store::human_size(info.size_bytes),
        if info.digest.is_empty() { "(a file outside the store)" } else { &info.digest },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            seed: None,
            num_predict: 256,
            system: None,
        }
    }

    #[test]
    fn commands_and_messages_are_told_apart() {
        assert_eq!(Command::parse("   "), None);
        assert_eq!(Command::parse("hello /bye"), Some(Command::Message("hello /bye".into())));
        assert_eq!(Command::parse("/bye"), Some(Command::Bye));
        assert_eq!(Command::parse(" /clear "), Some(Command::Clear));
        assert_eq!(Command::parse("/?"), Some(Command::Help));
        assert_eq!(Command::parse("/show"), Some(Command::Show));
        assert_eq!(
            Command::parse("/set temperature 0.2"),
            Some(Command::Set { name: "temperature".into(), value: "0.2".into() })
        );
        assert_eq!(
            Command::parse("/set parameter top_k 5"),
            Some(Command::Set { name: "top_k".into(), value: "5".into() })
        );
        assert_eq!(
            Command::parse("/set system You are a pirate.  "),
            Some(Command::Set { name: "system".into(), value: "You are a pirate.".into() })
        );
        assert!(matches!(Command::parse("/set"), Some(Command::Invalid(_))));
        match Command::parse("/frobnicate now") {
            Some(Command::Invalid(problem)) => {
                assert!(problem.contains("'/frobnicate'"), "{problem}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn settings_are_validated_and_applied() {
        let mut s = settings();
        assert_eq!(s.set("temperature", "0.2").as_deref(), Ok("Set 'temperature' to '0.2'."));
        assert_eq!(s.temperature, 0.2);
        s.set("top_k", "7").expect("top_k");
        s.set("top_p", "0.5").expect("top_p");
        s.set("min_p", "0").expect("min_p");
        s.set("seed", "42").expect("seed");
        s.set("num_predict", "12").expect("num_predict");
        s.set("system", "Be brief.").expect("system");
        assert_eq!((s.top_k, s.top_p, s.min_p, s.seed, s.num_predict), (7, 0.5, 0.0, Some(42), 12));
        assert_eq!(s.system.as_deref(), Some("Be brief."));
        let sampling = s.sampling();
        assert_eq!((sampling.top_k, sampling.max_tokens, sampling.seed), (7, Some(12), Some(42)));
        s.set("seed", "random").expect("seed");
        assert_eq!(s.seed, None);
        s.set("system", "").expect("clear system");
        assert_eq!(s.system, None);

        let before = s.clone();
        for (name, value) in [
            ("temperature", "-1"),
            ("temperature", "hot"),
            ("top_k", "-3"),
            ("top_p", "1.5"),
            ("min_p", "NaN"),
            ("seed", "x"),
            ("num_predict", "0"),
            ("mirostat", "2"),
        ] {
            let problem = s.set(name, value).expect_err(name);
            assert!(problem.contains(name), "{problem}");
        }
        assert_eq!(s, before, "a refused /set changes nothing");
        let shown = s.describe();
        assert!(
            shown.contains("temperature     0.2") && shown.contains("seed            random"),
            "{shown}"
        );
    }

    #[test]
    fn triple_quotes_gather_several_lines() {
        let mut a = Assembler::default();
        assert_eq!(a.feed("\"\"\"first line"), None);
        assert!(a.is_open());
        assert_eq!(a.feed("/bye is text here"), None);
        assert_eq!(a.feed(""), None);
        assert_eq!(
            a.feed("last\"\"\""),
            Some(Command::Message("first line\n/bye is text here\n\nlast".into()))
        );
        assert!(!a.is_open());

        assert_eq!(a.feed("\"\"\""), None);
        assert_eq!(a.feed("only"), None);
        assert_eq!(a.feed("\"\"\""), Some(Command::Message("only".into())));

        assert_eq!(a.feed("\"\"\"one line\"\"\""), Some(Command::Message("one line".into())));
        assert_eq!(a.feed("\"\"\""), None);
        assert_eq!(a.feed("\"\"\""), None, "an empty message is no message");
        assert_eq!(a.feed("\"\"\"abandoned"), None);
        a.reset();
        assert_eq!(a.feed("/bye"), Some(Command::Bye));
    }
}
