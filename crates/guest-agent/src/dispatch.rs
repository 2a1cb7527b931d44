//! Which handler serves which request.

use std::sync::Arc;

use cove_guest_protocol::{ErrorCode, Request, Response, SPAWN_INFO_VERSION};

use crate::error::AgentError;
use crate::responder::Responder;
use crate::state::Agent;
use crate::{commands, files};

/// Runs one request to its end and sends its response(s). `version` is the protocol version
/// the connection speaks: it picks the shape of answers that changed between versions.
pub async fn dispatch(agent: &Arc<Agent>, version: u32, request: Request, r: &Responder) {
    let ok = |()| Response::Ok;
    let result = match request {
        // Streaming answers: the handler sends its own frames.
        Request::Attach {
            command_id,
            offset,
            follow,
        } => return commands::attach::attach(agent, &command_id, offset, follow, r).await,
        Request::ListCommands => return commands::list::list(agent, r).await,
        Request::ReadFile {
            path,
            user,
            offset,
            length,
        } => return files::read::read_file(agent, path, user, offset, length, r).await,
        Request::ListDir { path, user, depth } => {
            return files::list::list_dir(agent, path, user, depth, r).await
        }
        Request::Watch(req) => return files::watch::watch(agent, req, r).await,

        Request::Ping => Ok(Response::Ok),
        Request::Spawn(req) => commands::start::start(agent, req)
            .await
            .map(|info| spawn_answer(version, info)),
        Request::StdinWrite { command_id, data } => {
            commands::write_stdin::stdin_write(agent, &command_id, &data)
                .await
                .map(ok)
        }
        Request::StdinClose { command_id } => {
            commands::write_stdin::stdin_close(agent, &command_id)
                .await
                .map(ok)
        }
        Request::Signal { command_id, signal } => {
            commands::kill::signal(agent, &command_id, signal)
                .await
                .map(ok)
        }
        Request::Kill {
            command_id,
            grace_ms,
        } => commands::kill::kill(agent, &command_id, grace_ms)
            .await
            .map(Response::Command),
        Request::GetCommand { command_id } => {
            commands::list::get(agent, &command_id).map(Response::Command)
        }
        Request::ForgetCommand { command_id } => commands::list::forget(agent, &command_id).map(ok),
        Request::Resize { command_id, size } => {
            commands::resize::resize(agent, &command_id, size).map(ok)
        }
        Request::Stat { path, user } => {
            files::blocking(agent, move |a| files::stat::stat(a, &path, user.as_deref()))
                .await
                .map(Response::FileInfo)
        }
        Request::MakeDir { path, user } => files::blocking(agent, move |a| {
            files::mkdir::make_dir(a, &path, user.as_deref())
        })
        .await
        .map(Response::FileInfo),
        Request::Remove { path, user } => files::blocking(agent, move |a| {
            files::remove::remove(a, &path, user.as_deref())
        })
        .await
        .map(ok),
        Request::Rename { from, to, user } => files::blocking(agent, move |a| {
            files::rename::rename(a, &from, &to, user.as_deref())
        })
        .await
        .map(Response::FileInfo),
        Request::SetXattrs(req) => {
            files::blocking(agent, move |a| files::xattrs::set_xattrs(a, req))
                .await
                .map(ok)
        }
        Request::GetXattrs(req) => {
            files::blocking(agent, move |a| files::xattrs::get_xattrs(a, req))
                .await
                .map(Response::Xattrs)
        }
        // The read loop routes these itself.
        Request::Hello { .. } | Request::WriteFile(_) | Request::Data { .. } | Request::DataEnd => {
            Err(AgentError::new(ErrorCode::Protocol, "unexpected frame"))
        }
    };
    r.send(result.unwrap_or_else(AgentError::into_response))
        .await;
}

/// The answer to a spawn on a connection of `version`: the command's state from
/// [`SPAWN_INFO_VERSION`] on, its pid alone before.
fn spawn_answer(version: u32, info: cove_guest_protocol::CommandInfo) -> Response {
    if version >= SPAWN_INFO_VERSION {
        Response::SpawnedCommand(info)
    } else {
        Response::Spawned { pid: info.pid }
    }
}
