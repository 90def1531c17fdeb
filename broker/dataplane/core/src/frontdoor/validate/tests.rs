use std::convert::Infallible;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use prost::Message;

use super::*;

type Frames = StreamBody<tokio_stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

fn body(chunks: Vec<Bytes>) -> Frames {
    StreamBody::new(tokio_stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok(Frame::data(c)))
            .collect::<Vec<_>>(),
    ))
}

fn framed(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.freeze()
}

fn append(journal: &str, content: &[u8]) -> Vec<u8> {
    protocol::AppendRequest {
        journal: journal.to_string(),
        content: Bytes::copy_from_slice(content),
        ..Default::default()
    }
    .encode_to_vec()
}

/// What a checked body forwards, frame by frame, and how it ends.
async fn forward(chunks: Vec<Bytes>) -> (Vec<Bytes>, Option<String>, Verdict) {
    let verdict = Verdict::default();
    let decode = decoder_of("/protocol.Journal/Append").unwrap();
    let mut checked = Checked::new(body(chunks), decode, verdict.clone());
    let mut frames = Vec::new();
    let mut error = None;
    while let Some(frame) = checked.frame().await {
        match frame {
            Ok(frame) => frames.push(frame.into_data().unwrap()),
            Err(e) => error = Some(e.to_string()),
        }
    }
    (frames, error, verdict)
}

#[tokio::test]
async fn whole_messages_in_a_frame_pass_as_that_frame() {
    let mut two = BytesMut::new();
    two.extend_from_slice(&framed(&append("a/journal", b"")));
    two.extend_from_slice(&framed(&append("", b"hello")));
    let two = two.freeze();
    let (frames, error, verdict) = forward(vec![two.clone()]).await;
    assert_eq!(frames, vec![two]);
    assert_eq!(error, None);
    assert_eq!(verdict.get(), None);
}

#[tokio::test]
async fn a_message_split_across_frames_is_forwarded_once_whole() {
    let first = framed(&append("a/journal", b""));
    let second = framed(&append("", &[7u8; 1000]));
    // The first message and 3 bytes of the second's header; then the rest in pieces.
    let mut head = BytesMut::from(&first[..]);
    head.extend_from_slice(&second[..3]);
    let chunks = vec![head.freeze(), second.slice(3..200), second.slice(200..)];
    let (frames, error, _) = forward(chunks).await;
    assert_eq!(error, None);
    assert_eq!(frames, vec![first, second]);
}

#[tokio::test]
async fn a_malformed_message_is_refused_naming_its_field() {
    let good = framed(&append("a/journal", b""));
    // Field 2 (journal, a string) holding bytes that are not UTF-8.
    let bad = framed(&[0x12, 0x02, 0xff, 0xfe]);
    let (frames, error, verdict) = forward(vec![good.clone(), bad]).await;
    assert_eq!(
        frames,
        vec![good],
        "nothing of the malformed message goes on"
    );
    let why = error.unwrap();
    assert!(
        why.starts_with("malformed request message: failed to decode Protobuf message:"),
        "{why}"
    );
    assert!(why.contains("AppendRequest.journal"), "{why}");
    assert_eq!(verdict.get().map(|c| &c.why), Some(&why));
    assert_eq!(verdict.get().map(|c| c.code), Some(3));

    // Truncated varints and random bytes alike.
    for bytes in [&[0x08, 0xff][..], &[0xff; 300][..]] {
        let (frames, error, _) = forward(vec![framed(bytes)]).await;
        assert!(frames.is_empty());
        assert!(error.unwrap().starts_with("malformed request message: "));
    }
}

#[tokio::test]
async fn compressed_and_oversized_messages_pass_unchecked() {
    let mut compressed = BytesMut::from(&framed(&[0xff; 10])[..]);
    compressed[0] = 1;
    let compressed = compressed.freeze();
    let (frames, error, _) = forward(vec![compressed.slice(..7), compressed.slice(7..)]).await;
    assert_eq!(error, None);
    assert_eq!(frames, vec![compressed.slice(..7), compressed.slice(7..)]);

    let mut huge = BytesMut::new();
    huge.extend_from_slice(&[0]);
    huge.extend_from_slice(&((MAX_CHECKED + 1) as u32).to_be_bytes());
    huge.extend_from_slice(b"whatever");
    let huge = huge.freeze();
    let (frames, error, _) = forward(vec![huge.clone()]).await;
    assert_eq!(error, None);
    assert_eq!(frames, vec![huge]);
}

#[tokio::test]
async fn only_journal_methods_have_decoders() {
    assert!(decoder_of("/protocol.Journal/Read").is_some());
    assert!(decoder_of("/protocol.Journal/Nope").is_none());
    assert!(decoder_of("/consumer.Shard/Stat").is_none());
}

#[derive(Debug)]
struct Reset;

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stream reset")
    }
}

#[tokio::test]
async fn a_response_cut_by_a_verdict_ends_invalid_argument() {
    let reset = || StreamBody::new(tokio_stream::iter(vec![Err::<Frame<Bytes>, _>(Reset)]));
    let verdict = Verdict::default();
    verdict.set(3, "malformed request message: boom".to_string());
    let mut answered = Answered::new(reset(), verdict);
    let trailers = answered
        .frame()
        .await
        .unwrap()
        .unwrap()
        .into_trailers()
        .unwrap();
    assert_eq!(trailers["grpc-status"], "3");
    assert_eq!(trailers["grpc-message"], "malformed request message: boom");
    assert!(answered.frame().await.is_none());

    // Without a verdict, the backend's failure is the response's.
    let mut answered = Answered::new(reset(), Verdict::default());
    assert!(answered.frame().await.unwrap().is_err());
}
